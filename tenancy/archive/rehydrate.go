package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// Rehydrate brings an archived tenant back, or resumes its re-hydration
// at the first step not done, and runs it to the end:
//
//  1. check: the object is read and checked as the archive's verify step
//     did (its bytes' SHA-256, every file against the manifest): a
//     corrupt object is refused with ErrCorrupt and nothing changes; then
//     the tenant becomes rehydrating;
//  2. import: the object (read and checked again) is imported into the
//     tenant (resumable), the projections catch up, and the read models
//     are compared with the archive's: a difference stops here;
//  3. activate: the tenant gets back the status it had before the
//     archive (active: served again);
//  4. delete: the object is deleted from the store: the tenant's data is
//     in the database again, and a stale copy would be one more store to
//     erase.
//
// A tenant that was re-hydrated returns its record as it is.
func (a *Archiver) Rehydrate(ctx context.Context, who tenancy.Actor, tenant domain.TenantID) (Record, error) {
	if err := a.cfg.Directory.RecordFor(ctx, who, "rehydrate", tenant, nil); err != nil {
		return Record{}, err
	}
	var r Record
	err := a.locked(ctx, tenant, func() error {
		var err error
		if r, err = a.load(ctx, tenant); err != nil {
			return err
		}
		switch r.Phase {
		case PhaseRehydrated:
			return nil
		case PhaseArchiving:
			return fmt.Errorf("%w: the archive of %s is not finished (next step %s): run `strata tenants archive %s` to finish it first",
				domain.ErrRejected, tenant, r.NextStep(), tenant)
		case PhaseArchived:
			r.Phase, r.Rehydration = PhaseRehydrating, &Rehydration{RequestedBy: who.Subject, Steps: map[string]time.Time{}}
			if err := a.save(ctx, &r, ""); err != nil {
				return err
			}
		}
		r.LastError = ""
		return a.runRehydration(ctx, &r)
	})
	if err != nil {
		a.recordError(tenant, err)
		if cur, lerr := a.load(context.WithoutCancel(ctx), tenant); lerr == nil {
			r = cur
		}
	}
	return r, err
}

func (a *Archiver) runRehydration(ctx context.Context, r *Record) error {
	steps := []struct {
		name string
		fn   func(context.Context, *Record) error
	}{
		{StepCheck, a.check},
		{StepImport, a.importObject},
		{StepActivate, a.activate},
		{StepDelete, a.deleteObject},
	}
	for _, s := range steps {
		if _, done := r.Rehydration.Steps[s.name]; done {
			continue
		}
		a.progress(r.Tenant, s.name, "step "+s.name)
		if err := s.fn(ctx, r); err != nil {
			return fmt.Errorf("rehydrate %s: step %s: %w", r.Tenant, s.name, err)
		}
		r.Rehydration.Steps[s.name] = time.Now().UTC()
		if s.name == StepDelete {
			now := time.Now().UTC()
			r.Phase, r.Rehydration.FinishedAt = PhaseRehydrated, &now
		}
		if err := a.save(ctx, r, ""); err != nil {
			return fmt.Errorf("rehydrate %s: record step %s: %w", r.Tenant, s.name, err)
		}
		if err := a.point(ctx, r.Tenant, "after-rehydrate-"+s.name); err != nil {
			return err
		}
	}
	return nil
}

// check refuses a corrupt object before anything changes, then takes the
// tenant to rehydrating.
func (a *Archiver) check(ctx context.Context, r *Record) error {
	f, err := a.fetch(ctx, r, StepCheck)
	if err != nil {
		return err
	}
	f.Close()
	os.Remove(f.Name())
	_, err = a.cfg.Directory.SetArchiveStatus(ctx, tenancy.Actor{Subject: r.Rehydration.RequestedBy}, "set_rehydrating", r.Tenant, tenancy.StatusRehydrating, r.Reason)
	return err
}

// importObject imports the object and compares the read models once the
// projections caught up.
func (a *Archiver) importObject(ctx context.Context, r *Record) error {
	f, err := a.fetch(ctx, r, StepImport)
	if err != nil {
		return err
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	a.progress(r.Tenant, StepImport, "importing the archive")
	res, err := a.cfg.Portability.Import(ctx, f, portability.ImportOptions{Tenant: r.Tenant, Wait: a.cfg.CatchUp})
	if errors.Is(err, portability.ErrAlreadyImported) {
		// A run killed after the import and before its record: compare
		// the read models again.
		f.Close()
		if f, err = a.fetch(ctx, r, StepImport); err != nil {
			return err
		}
		res, err = a.cfg.Portability.Recompare(ctx, f, r.Tenant, a.cfg.CatchUp)
	}
	r.Rehydration.Import = &res
	if err != nil {
		_ = a.save(ctx, r, "")
		return err
	}
	return nil
}

// activate gives the tenant back the status it had before the archive.
func (a *Archiver) activate(ctx context.Context, r *Record) error {
	t, err := a.cfg.Directory.SetArchiveStatus(ctx, tenancy.Actor{Subject: r.Rehydration.RequestedBy}, "rehydrated", r.Tenant, r.PriorStatus, "")
	if err != nil {
		return err
	}
	r.Rehydration.Status = t.Status
	return nil
}

// deleteObject removes the archive's object from the store.
func (a *Archiver) deleteObject(ctx context.Context, r *Record) error {
	return a.cfg.Objects.Delete(ctx, r.ObjectKey)
}
