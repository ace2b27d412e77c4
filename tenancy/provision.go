package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// ProvisionRequest asks for a tenant.
type ProvisionRequest struct {
	ID   domain.TenantID
	Name string // display name; "" keeps the current one (or none)
	// Quotas, if set, are what the quotas step writes; nil: the Store's
	// DefaultQuotasFunc (the environment's overrides for the tenant), else
	// none (the serving defaults apply).
	Quotas *Quotas
	// Placement is where the tenant's data is to live (a placement of
	// `strata placements`); "" is DefaultPlacement. A tenant already in
	// the directory keeps its own: moving one is `strata tenants move`.
	Placement string
}

// Step is one step of provisioning. Each runs in a transaction of its own
// that also records it as done in tenants.provisioning, so a provision
// that stops anywhere (an error, a crash, kill -9) leaves a tenant whose
// status is provisioning and whose record shows the steps done; running
// provision again skips those and finishes the rest. A step must be
// idempotent on its own too: it may have done its work in a transaction
// that committed after the caller gave up waiting.
type Step struct {
	Name string
	Doc  string
	run  func(ctx context.Context, s *Store, tx pgx.Tx, req ProvisionRequest) error
}

// ProvisionSteps are the steps in order. The directory row comes first
// (so a half-provisioned tenant is visible), activation last (so nothing
// is served before every other step is done). Later steps slot in before
// "activate": the placement's resources (ARCHITECTURE decision 14), the
// tenant's entry in the erasure inventory (decision 13).
var ProvisionSteps = []Step{
	{Name: "directory", Doc: "the directory row: status provisioning, display name, placement (pool unless asked)", run: stepDirectory},
	{Name: "quotas", Doc: "the tenant's quotas: the request's, else its values of the environment's *_OVERRIDES, else none (defaults apply)", run: stepQuotas},
	{Name: "resources", Doc: "per-tenant resources of its placement: none (a placement's database is migrated when it is added; its tables are tenant-scoped like the pool's)", run: stepResources},
	{Name: "activate", Doc: "status active: every serving process serves the tenant once the push reaches it", run: stepActivate},
}

// Provision creates the tenant or finishes its provisioning: idempotent
// (provisioning an active tenant again changes nothing, unless Name is
// new, which renames it) and resumable (see Step). Tenants being erased or
// erased are refused (domain.ErrRejected).
func (s *Store) Provision(ctx context.Context, a Actor, req ProvisionRequest) (Tenant, error) {
	if _, err := domain.ParseTenantID(string(req.ID)); err != nil {
		return Tenant{}, fmt.Errorf("%w: tenant ID %q must match [a-z0-9-]{1,63}", domain.ErrInvalid, req.ID)
	}
	if len(req.Name) > 200 {
		return Tenant{}, fmt.Errorf("%w: the name is longer than 200 bytes", domain.ErrInvalid)
	}
	if req.Quotas != nil {
		if err := req.Quotas.Validate(); err != nil {
			return Tenant{}, err
		}
	}
	detail := map[string]any{"name": req.Name}
	if req.Quotas != nil {
		detail["quotas"] = req.Quotas
	}
	if req.Placement != "" {
		detail["placement"] = req.Placement
	}
	if err := s.audit(ctx, a, "provision", req.ID, detail); err != nil {
		return Tenant{}, err
	}
	for _, step := range ProvisionSteps {
		ran := false
		err := s.ownerTx(ctx, func(tx pgx.Tx) error {
			if step.Name != "directory" {
				t, err := getTenant(ctx, tx, req.ID, true)
				if err != nil {
					return err
				}
				if t.Status == StatusErasing || t.Status == StatusErased {
					return fmt.Errorf("%w: tenant %s is %s; it cannot be provisioned", domain.ErrRejected, req.ID, t.Status)
				}
				if _, done := t.Provisioning[step.Name]; done {
					return nil
				}
			}
			ran = true
			if err := step.run(ctx, s, tx, req); err != nil {
				return fmt.Errorf("provision %s: step %s: %w", req.ID, step.Name, err)
			}
			stamp, _ := json.Marshal(map[string]any{step.Name: s.cfg.NowFunc().UTC()})
			// Only a step not yet recorded is stamped: a rerun of the
			// directory step (whose row existed) keeps its first time.
			_, err := tx.Exec(ctx, `UPDATE tenants SET provisioning = $2::jsonb || provisioning WHERE id = $1 AND NOT provisioning ? $3`,
				req.ID, stamp, step.Name)
			return err
		})
		if err != nil {
			return Tenant{}, err
		}
		if ran {
			hit(step.Name)
			if s.cfg.AfterStepFunc != nil {
				if err := s.cfg.AfterStepFunc(ctx, req.ID, step.Name); err != nil {
					return Tenant{}, fmt.Errorf("provision %s: after step %s: %w", req.ID, step.Name, err)
				}
			}
		}
	}
	var t Tenant
	err := s.ownerTx(ctx, func(tx pgx.Tx) (err error) {
		t, err = getTenant(ctx, tx, req.ID, false)
		return err
	})
	return t, err
}

func stepDirectory(ctx context.Context, s *Store, tx pgx.Tx, req ProvisionRequest) error {
	placement := req.Placement
	if placement == "" {
		placement = DefaultPlacement
	}
	var status string
	err := tx.QueryRow(ctx, `SELECT status FROM placements WHERE name = $1`, placement).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: no placement %q (`strata placements list`)", domain.ErrInvalid, placement)
	case err != nil:
		return err
	case status != "active":
		return fmt.Errorf("%w: placement %s is %s: no tenant may be placed there", domain.ErrRejected, placement, status)
	}
	var created domain.TenantID
	err = tx.QueryRow(ctx, `INSERT INTO tenants (id, name, placement) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO NOTHING RETURNING id`, req.ID, req.Name, placement).Scan(&created)
	if err == nil {
		return nil // created
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	// The row exists (an earlier provision, or this one's retry).
	t, err := getTenant(ctx, tx, req.ID, true)
	if err != nil {
		return err
	}
	if t.Status == StatusErasing || t.Status == StatusErased {
		return fmt.Errorf("%w: tenant %s is %s; it cannot be provisioned", domain.ErrRejected, req.ID, t.Status)
	}
	if req.Placement != "" && req.Placement != t.Placement {
		return fmt.Errorf("%w: tenant %s is placed in %s; moving a tenant is `strata tenants move`, not provisioning", domain.ErrRejected, req.ID, t.Placement)
	}
	if req.Name != "" && req.Name != t.Name {
		_, err = tx.Exec(ctx, `UPDATE tenants SET name = $2 WHERE id = $1`, req.ID, req.Name)
	}
	return err
}

func stepQuotas(ctx context.Context, s *Store, tx pgx.Tx, req ProvisionRequest) error {
	var q Quotas
	switch {
	case req.Quotas != nil:
		q = *req.Quotas
	case s.cfg.DefaultQuotasFunc != nil:
		q = s.cfg.DefaultQuotasFunc(req.ID)
	}
	if q == (Quotas{}) {
		return nil
	}
	raw, _ := json.Marshal(q)
	_, err := tx.Exec(ctx, `UPDATE tenants SET quotas = $2 WHERE id = $1`, req.ID, raw)
	return err
}

func stepResources(context.Context, *Store, pgx.Tx, ProvisionRequest) error {
	return nil // every placement's schema is in place before a tenant is placed there
}

func stepActivate(ctx context.Context, s *Store, tx pgx.Tx, req ProvisionRequest) error {
	if err := refuseUnfinishedImport(ctx, tx, req.ID); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE tenants SET status = 'active' WHERE id = $1 AND status = 'provisioning'`, req.ID)
	return err
}

// refuseUnfinishedImport refuses to serve a tenant whose archive import
// has begun but not finished (its tenant_arrivals row, written before the
// first imported event, has no end yet): the process managers and the
// relay pass over every event of such a tenant as imported history, so a
// command served now would never be acted on. The import activates the
// tenant itself when it ends.
func refuseUnfinishedImport(ctx context.Context, tx pgx.Tx, id domain.TenantID) error {
	var importing bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenant_arrivals WHERE tenant = $1 AND through_tx IS NULL AND source LIKE 'import:%')`, id).Scan(&importing); err != nil {
		return fmt.Errorf("look for an unfinished import of %s: %w", id, err)
	}
	if importing {
		return fmt.Errorf("%w: an archive import into %s has begun and not finished: run the same `strata tenants import` again to finish it before the tenant is served", domain.ErrRejected, id)
	}
	return nil
}
