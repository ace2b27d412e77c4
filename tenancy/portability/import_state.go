package portability

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/placement"
)

// What an import finds when it starts, and whether it may write: into an
// empty tenant, or to continue its own earlier run of the same archive.

// ErrImportLocked: another import of the tenant holds its lock.
var ErrImportLocked = fmt.Errorf("%w: another import into the tenant is running", domain.ErrRejected)

// lockImport takes the session advisory lock db.ImportLockClass keyed by
// hashtext(tenant) on a connection of its own, held until release: the
// tenant's erasure waits until no session holds it (ARCHITECTURE
// decisions 13 and 18), and a second import of the tenant is refused
// rather than interleaved.
func (s *Service) lockImport(ctx context.Context, tenant domain.TenantID) (release func(), err error) {
	conn, err := s.cfg.Owner.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("take the import's lock: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, db.ImportLockClass, string(tenant)).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("take the import's lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, fmt.Errorf("%w: %s (wait for it to end, or find it in pg_locks: advisory, classid %d)", ErrImportLocked, tenant, uint32(db.ImportLockClass))
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, db.ImportLockClass, string(tenant)); err != nil {
			// The session may still hold the lock: close it rather than
			// give it back to the pool holding it.
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, nil
}

// importState is what the database holds of the tenant when an import
// starts.
type importState struct {
	known             bool
	status, placement string
	// events is the tenant's event count; prefix: its first events, in
	// log order, are the archive's first (under the target's IDs), as
	// many as both have.
	events int64
	prefix bool
	// arrival: the tenant has a tenant_arrivals row (through: with its
	// end set); ours: its source is an import of this archive.
	arrival, ours, through bool
	source                 string
}

// importSource is the tenant_arrivals source of an import of p: the
// archive's tenant and content, so that a rerun knows its own.
func importSource(p *plan) string {
	return "import:" + string(p.manifest.Tenant) + ":" + p.digest[:16]
}

// state reads the directory, the arrival row and the tenant's event IDs.
func (s *Service) state(ctx context.Context, tenant domain.TenantID, p *plan, m ids) (importState, error) {
	var st importState
	var err error
	if st.status, st.placement, st.known, err = s.directoryEntry(ctx, tenant); err != nil {
		return st, err
	}
	err = s.ownerTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT source, through_tx IS NOT NULL FROM tenant_arrivals WHERE tenant = $1`, tenant).Scan(&st.source, &st.through)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		st.arrival = err == nil
		return err
	})
	if err != nil {
		return st, fmt.Errorf("read the tenant's arrival: %w", err)
	}
	st.ours = st.arrival && st.source == importSource(p)
	st.prefix = true
	err = tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, true, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event_id FROM events WHERE tenant_id = $1 ORDER BY tx_id, position`, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		var id [16]byte
		for rows.Next() {
			if err := rows.Scan(&id); err != nil {
				return err
			}
			if st.prefix && st.events < p.events() && m.of(p.ids[st.events]) != uuid.UUID(id) {
				st.prefix = false
			}
			st.events++
		}
		return rows.Err()
	})
	if err != nil {
		return st, fmt.Errorf("read the tenant's event IDs: %w", err)
	}
	return st, nil
}

// admit decides, from what the tenant holds, whether the import may write:
// into an empty tenant, or to continue its own earlier run.
func (s *Service) admit(ctx context.Context, tenant domain.TenantID, p *plan, st importState) error {
	if st.known && st.placement != placement.Pool {
		return fmt.Errorf("%w: tenant %s is placed in %s; importing into a tenant outside the shared database is not supported yet", domain.ErrRejected, tenant, st.placement)
	}
	if st.known && (st.status == "erasing" || st.status == "erased") {
		return fmt.Errorf("%w: tenant %s is %s: it cannot be imported into", domain.ErrRejected, tenant, st.status)
	}
	if !st.known && s.cfg.Provision == nil {
		return fmt.Errorf("%w: no tenant %q in the directory (provision it first)", domain.ErrNotFound, tenant)
	}
	n := p.events()
	switch {
	case !st.ours && st.arrival && !st.through && strings.HasPrefix(st.source, "import:") && st.events > 0:
		return fmt.Errorf("%w: an import of another archive into %s is incomplete (%s, %d events loaded): run that import again to complete it",
			ErrNotEmpty, tenant, st.source, st.events)
	case st.prefix && st.events == n && st.known && ((st.ours && st.through) || (!st.ours && n > 0)):
		return fmt.Errorf("%w: %s holds exactly this archive's %d events (from %s): it was imported before; to see whether its read models caught up: strata replay status",
			ErrAlreadyImported, tenant, n, p.manifest.Tenant)
	case st.prefix && st.events > n && n > 0:
		return fmt.Errorf("%w: %s holds this archive's %d events and %d written since: it was imported before and has been used since; an archive is imported only into an empty tenant",
			ErrNotEmpty, tenant, n, st.events-n)
	case st.ours && st.prefix:
		// An earlier run of this import: continue after what it wrote.
	default:
		if err := s.checkEmpty(ctx, tenant); err != nil {
			return err
		}
	}
	if st.known && st.status == "active" {
		return fmt.Errorf("%w: tenant %s is active: suspend it first (strata tenants suspend %s --reason import) so that nothing writes to it while its history loads, and resume it after the import",
			domain.ErrRejected, tenant, tenant)
	}
	return nil
}

// checkEmpty refuses a tenant that has events, idempotency records,
// read-model rows or dead letters.
func (s *Service) checkEmpty(ctx context.Context, tenant domain.TenantID) error {
	var found []string
	err := tenantTx(ctx, s.cfg.App, db.RoleApp, tenant, true, func(tx pgx.Tx) error {
		for _, t := range []string{"events", "idempotency_keys"} {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+t+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				found = append(found, fmt.Sprintf("%d rows in %s", n, t))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = tenantTx(ctx, s.cfg.Projector, db.RoleProjector, tenant, true, func(tx pgx.Tx) error {
		tables := []string{"dead_letters"}
		for _, t := range s.cfg.Tables {
			tables = append(tables, t.Name)
		}
		for _, t := range tables {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{t}.Sanitize()+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				found = append(found, fmt.Sprintf("%d rows in %s", n, t))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return fmt.Errorf("%w: %s has %s; an archive is imported only into an empty tenant", ErrNotEmpty, tenant, strings.Join(found, ", "))
	}
	return nil
}
