package archive

import (
	"context"
	"errors"
	"io"
)

// ObjectStore is where archives go: an S3-compatible bucket in production
// (package s3store), whatever implements these five calls otherwise.
type ObjectStore interface {
	// Name identifies the store in receipts and errors, e.g.
	// "s3://bucket@host:port"; it never holds a credential.
	Name() string
	// Put writes the object key with size bytes from r, replacing one
	// that is there.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get reads the object key; ErrNoObject when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Delete removes the object key; deleting one that is not there is no
	// error.
	Delete(ctx context.Context, key string) error
	// List returns the keys under prefix, in lexical order.
	List(ctx context.Context, prefix string) ([]string, error)
}

// ErrNoObject: the object is not in the store.
var ErrNoObject = errors.New("no such object in the archive store")

// Prefix is where a tenant's archives are in the store: every object of
// the tenant is under it, which the erasure's external store lists.
func Prefix(tenant string) string { return "tenants/" + tenant + "/" }
