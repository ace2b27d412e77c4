package archive

import (
	"context"
	"fmt"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/tenancy"
)

// ErasureStore is the archive store as an erasure's external store: the
// erasure of a tenant deletes every object under its prefix, an archive
// or one left behind by an archive that was abandoned, so that no copy of
// an erased tenant outlives its receipt.
type ErasureStore struct {
	Objects ObjectStore
}

var _ tenancy.ExternalStore = ErasureStore{}

// Name is "archive:<store>".
func (s ErasureStore) Name() string { return "archive:" + s.Objects.Name() }

// Kind is tenancy.KindArchive.
func (s ErasureStore) Kind() tenancy.StoreKind { return tenancy.KindArchive }

// Count is how many objects the tenant has in the store.
func (s ErasureStore) Count(ctx context.Context, tenant domain.TenantID) (int64, error) {
	keys, err := s.Objects.List(ctx, Prefix(string(tenant)))
	return int64(len(keys)), err
}

// Erase deletes them.
func (s ErasureStore) Erase(ctx context.Context, tenant domain.TenantID) error {
	keys, err := s.Objects.List(ctx, Prefix(string(tenant)))
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.Objects.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// Verification describes Count.
func (s ErasureStore) Verification(tenant domain.TenantID) string {
	return fmt.Sprintf("list %s in %s: no key", Prefix(string(tenant)), s.Objects.Name())
}
