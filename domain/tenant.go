package domain

import (
	"context"
	"fmt"
	"regexp"
)

// TenantID names a tenant. It matches [a-z0-9-]{1,63} so that it is safe in
// stream names, log lines and PostgreSQL settings without quoting.
type TenantID string

var tenantPattern = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)

// ParseTenantID validates s as a tenant ID.
func ParseTenantID(s string) (TenantID, error) {
	if !tenantPattern.MatchString(s) {
		return "", fmt.Errorf("%w: tenant id must match [a-z0-9-]{1,63}", ErrInvalid)
	}
	return TenantID(s), nil
}

func (t TenantID) String() string { return string(t) }

type tenantKey struct{}

// NewContext returns a context carrying the tenant. Only the authentication
// middleware (from a verified token) and message handlers (from envelope
// metadata) should call it.
func NewContext(ctx context.Context, t TenantID) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantFromContext returns the tenant in ctx, if any.
func TenantFromContext(ctx context.Context) (TenantID, bool) {
	t, ok := ctx.Value(tenantKey{}).(TenantID)
	return t, ok && t != ""
}
