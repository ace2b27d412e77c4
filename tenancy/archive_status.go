package tenancy

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// archiveMoves are the status changes of the archive's lifecycle (package
// tenancy/archive): a tenant goes out of service to be written out, its
// data then only in the archive store, and back through an import.
// Archiving goes back to active or suspended when an archive is abandoned
// before its purge; rehydrating ends in the status the tenant had before.
var archiveMoves = map[Status][]Status{
	StatusArchiving:   {StatusActive, StatusSuspended},
	StatusArchived:    {StatusArchiving},
	StatusRehydrating: {StatusArchived},
	StatusActive:      {StatusArchiving, StatusRehydrating},
	StatusSuspended:   {StatusArchiving, StatusRehydrating},
}

// SetArchiveStatus moves the tenant to status to along the archive's
// lifecycle (audited as action, with the reason): a tenant already there
// stays as it is; any other change is refused (domain.ErrRejected). It
// returns the tenant as it is after the change, whose Version the
// barrier waits for.
func (s *Store) SetArchiveStatus(ctx context.Context, a Actor, action string, id domain.TenantID, to Status, reason string) (Tenant, error) {
	from, ok := archiveMoves[to]
	if !ok {
		return Tenant{}, fmt.Errorf("%w: %s is not a status of the archive's lifecycle", domain.ErrInvalid, to)
	}
	if err := s.audit(ctx, a, action, id, map[string]any{"reason": reason, "status": string(to)}); err != nil {
		return Tenant{}, err
	}
	var t Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) error {
		cur, err := getTenant(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if cur.Status == to {
			t = cur
			return nil
		}
		if !slices.Contains(from, cur.Status) {
			return fmt.Errorf("%w: tenant %s is %s; it cannot become %s", domain.ErrRejected, id, cur.Status, to)
		}
		t, err = scanTenant(tx.QueryRow(ctx, `UPDATE tenants SET status = $2, status_reason = nullif($3, '') WHERE id = $1 RETURNING `+tenantColumns,
			id, to, reason))
		return err
	})
	return t, err
}
