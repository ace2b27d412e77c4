package esdb

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Stream names carry the namespace and the tenant:
//
//	<namespace>-<tenant>.<stream>      e.g. strata-acme.order-42
//
// The parts cannot be confused: a namespace has no '-' (so the first '-'
// ends it, and ESDB's $by_category projection files every strata stream
// under the category <namespace>), a tenant has no '.' (so the first '.'
// after the namespace ends it), and the stream is the rest. Every part is
// checked against its pattern in both directions, so a name is decoded only
// if encoding the decoded parts gives the same name back.
var (
	namespacePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	tenantPattern    = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)
	streamPattern    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,200}$`)
)

// DefaultNamespace prefixes every stream the store writes unless
// WithNamespace says otherwise.
const DefaultNamespace = "strata"

// ErrInvalidName is returned for a tenant or stream that cannot be part of a
// stream name: tenants match [a-z0-9-]{1,63}, streams [A-Za-z0-9._-]{1,200}.
var ErrInvalidName = errors.New("invalid tenant or stream name")

// naming encodes and decodes the stream names of one namespace.
type naming struct {
	ns     string
	prefix string // ns + "-": the server-side filter of the global log
}

func newNaming(ns string) (naming, error) {
	if !namespacePattern.MatchString(ns) {
		return naming{}, fmt.Errorf("namespace %q must match %s", ns, namespacePattern)
	}
	return naming{ns: ns, prefix: ns + "-"}, nil
}

// encode returns the ESDB stream name of tenant's stream.
func (n naming) encode(tenant, stream string) (string, error) {
	if !tenantPattern.MatchString(tenant) {
		return "", fmt.Errorf("%w: tenant %q", ErrInvalidName, tenant)
	}
	if !streamPattern.MatchString(stream) {
		return "", fmt.Errorf("%w: stream %q", ErrInvalidName, stream)
	}
	return n.prefix + tenant + "." + stream, nil
}

// decode is the inverse of encode. ok is false for any name encode could
// not have produced in this namespace: another namespace's streams, system
// streams ($...), and foreign streams that merely share the prefix.
func (n naming) decode(name string) (tenant, stream string, ok bool) {
	rest, found := strings.CutPrefix(name, n.prefix)
	if !found {
		return "", "", false
	}
	tenant, stream, found = strings.Cut(rest, ".")
	if !found || !tenantPattern.MatchString(tenant) || !streamPattern.MatchString(stream) {
		return "", "", false
	}
	return tenant, stream, true
}
