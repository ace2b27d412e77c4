package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/placement"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// Archive archives the tenant, or resumes its archive at the first step
// not done, and runs it to the end (Begin, then Resume). An archived
// tenant's record is returned as it is. reason is required (recorded).
func (a *Archiver) Archive(ctx context.Context, who tenancy.Actor, tenant domain.TenantID, reason string) (Record, error) {
	r, err := a.Begin(ctx, who, tenant, reason)
	if err != nil || r.Phase != PhaseArchiving {
		return r, err
	}
	return a.Resume(ctx, tenant)
}

// Begin records the call (audited) and creates the tenant's archive row
// if there is none, without running a step: what the HTTP job answers
// before it runs the rest in the background (Resume).
func (a *Archiver) Begin(ctx context.Context, who tenancy.Actor, tenant domain.TenantID, reason string) (Record, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" || len(reason) > 500 {
		return Record{}, fmt.Errorf("%w: an archive needs a reason of 1 to 500 bytes (recorded)", domain.ErrInvalid)
	}
	if err := a.cfg.Directory.RecordFor(ctx, who, "archive", tenant, map[string]any{"reason": reason}); err != nil {
		return Record{}, err
	}
	return a.start(ctx, who, tenant, reason)
}

// Resume runs the tenant's archive from its first step not done to the
// end; an error is also recorded in the row (last_error).
func (a *Archiver) Resume(ctx context.Context, tenant domain.TenantID) (Record, error) {
	var r Record
	err := a.locked(ctx, tenant, func() error {
		// Read under the lock: another runner may have moved it on.
		var err error
		if r, err = a.load(ctx, tenant); err != nil {
			return err
		}
		if r.Phase != PhaseArchiving {
			return nil
		}
		r.LastError = ""
		return a.runArchive(ctx, &r)
	})
	if err != nil {
		a.recordError(tenant, err)
		if cur, lerr := a.load(context.WithoutCancel(ctx), tenant); lerr == nil {
			r = cur
		}
	}
	return r, err
}

func (a *Archiver) runArchive(ctx context.Context, r *Record) error {
	steps := []struct {
		name string
		fn   func(context.Context, *Record) error
	}{
		{StepFence, a.fence},
		{StepUpload, a.upload},
		{StepVerify, a.verify},
		{StepPurge, a.purge},
		{StepReceipt, a.receipt},
	}
	for _, s := range steps {
		if _, done := r.Steps[s.name]; done {
			continue
		}
		a.progress(r.Tenant, s.name, "step "+s.name)
		if err := s.fn(ctx, r); err != nil {
			return fmt.Errorf("archive %s: step %s: %w", r.Tenant, s.name, err)
		}
		if err := a.save(ctx, r, s.name); err != nil {
			return fmt.Errorf("archive %s: record step %s: %w", r.Tenant, s.name, err)
		}
		if err := a.point(ctx, r.Tenant, "after-"+s.name); err != nil {
			return err
		}
	}
	return nil
}

// fence takes the tenant out of service and waits until nothing writes
// it any more. A tenant with process work pending is put back as it was:
// the archive is abandoned before anything was written out.
func (a *Archiver) fence(ctx context.Context, r *Record) error {
	if err := a.refuseProcessWork(ctx, r.Tenant); err != nil {
		return a.abandon(ctx, r, err)
	}
	who := tenancy.Actor{Subject: r.RequestedBy}
	t, err := a.cfg.Directory.SetArchiveStatus(ctx, who, "set_archiving", r.Tenant, tenancy.StatusArchiving, r.Reason)
	if err != nil {
		return err
	}
	progress := func(msg string) { a.progress(r.Tenant, StepFence, msg) }
	if r.Barrier, err = a.cfg.Fence.Barrier(ctx, r.Tenant, t.Version, progress); err != nil {
		_ = a.save(ctx, r, "")
		return err
	}
	if r.Quiesce, err = a.cfg.Fence.Quiesce(ctx, r.Tenant, string(tenancy.StatusArchiving), progress); err != nil {
		_ = a.save(ctx, r, "")
		return err
	}
	// A process manager may have set a deadline while it decided the
	// tenant's last events: looked at again, now that none runs.
	if err := a.refuseProcessWork(ctx, r.Tenant); err != nil {
		return a.abandon(ctx, r, err)
	}
	return nil
}

// refuseProcessWork fails with ErrProcessWork when a process manager has
// a pending deadline or step of the tenant: an archive carries the log,
// not the process managers' state, and a re-hydrated tenant's history is
// not decided again, so that work would be lost.
func (a *Archiver) refuseProcessWork(ctx context.Context, tenant domain.TenantID) error {
	var deadlines, steps int64
	err := pgx.BeginFunc(ctx, a.cfg.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleEraser); err != nil {
			return fmt.Errorf("become %s: %w", db.RoleEraser, err)
		}
		if err := db.SetTenant(ctx, tx, string(tenant)); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM process_deadlines WHERE tenant_id = $1 AND status = 'pending'),
       (SELECT count(*) FROM process_steps WHERE tenant_id = $1 AND status IN ('pending', 'parked'))`, tenant).Scan(&deadlines, &steps)
	})
	if err != nil {
		return fmt.Errorf("look for the tenant's process work: %w", err)
	}
	if deadlines+steps > 0 {
		return fmt.Errorf("%w (%d deadlines, %d steps): an archive does not carry process managers' state; let them finish or cancel them (`strata replay processes`), then archive again",
			ErrProcessWork, deadlines, steps)
	}
	return nil
}

// abandon puts the tenant back in the status it had and removes the
// archive's row, so that a later archive starts afresh; cause is
// returned.
func (a *Archiver) abandon(ctx context.Context, r *Record, cause error) error {
	who := tenancy.Actor{Subject: r.RequestedBy}
	if _, err := a.cfg.Directory.SetArchiveStatus(ctx, who, "archive_abandoned", r.Tenant, r.PriorStatus, cause.Error()); err != nil && !errors.Is(err, domain.ErrRejected) {
		return errors.Join(cause, err)
	}
	err := a.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM tenant_archives WHERE tenant = $1 AND phase = 'archiving'`, r.Tenant)
		return err
	})
	return errors.Join(cause, err)
}

// upload writes the tenant's export to a private file, hashing it, and
// puts it into the store.
func (a *Archiver) upload(ctx context.Context, r *Record) error {
	f, err := os.CreateTemp("", "strata-archive-*.tar.gz")
	if err != nil {
		return err
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	h := sha256.New()
	a.progress(r.Tenant, StepUpload, "exporting")
	m, err := a.cfg.Portability.Export(ctx, r.Tenant, io.MultiWriter(f, h))
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if !m.Export.Quiescent {
		return fmt.Errorf("the tenant was written to while it was exported, although it is archiving: run the archive again")
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	key := Prefix(string(r.Tenant)) + r.ArchiveID + ".tar.gz"
	a.progress(r.Tenant, StepUpload, fmt.Sprintf("putting %d bytes into %s as %s", size, a.cfg.Objects.Name(), key))
	if err := a.cfg.Objects.Put(ctx, key, f, size); err != nil {
		return err
	}
	r.Store, r.ObjectKey, r.Bytes, r.SHA256, r.Manifest = a.cfg.Objects.Name(), key, size, hex.EncodeToString(h.Sum(nil)), &m
	return nil
}

// verify reads the object back (fetch) and checks it.
func (a *Archiver) verify(ctx context.Context, r *Record) error {
	f, err := a.fetch(ctx, r, StepVerify)
	if err != nil {
		return err
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	return nil
}

// fetch copies the recorded object into a private file and checks it:
// its size and SHA-256 against the record, then every file against the
// manifest and every event through its module (portability.Check), and
// the manifest against the recorded one. ErrCorrupt when anything
// differs. The file is returned at its start.
func (a *Archiver) fetch(ctx context.Context, r *Record, step string) (*os.File, error) {
	if r.ObjectKey == "" || r.Manifest == nil {
		return nil, fmt.Errorf("the archive of %s records no object", r.Tenant)
	}
	if r.Store != a.cfg.Objects.Name() {
		return nil, fmt.Errorf("the archive of %s is in %s, but this process's archive store is %s", r.Tenant, r.Store, a.cfg.Objects.Name())
	}
	a.progress(r.Tenant, step, "reading "+r.ObjectKey+" back from "+r.Store)
	obj, err := a.cfg.Objects.Get(ctx, r.ObjectKey)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	f, err := os.CreateTemp("", "strata-archive-*.tar.gz")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), obj)
	if err != nil {
		return fail(fmt.Errorf("read %s from %s: %w", r.ObjectKey, r.Store, err))
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != r.Bytes || sum != r.SHA256 {
		return fail(fmt.Errorf("%w: %s in %s has %d bytes of SHA-256 %s; the archive wrote %d bytes of SHA-256 %s",
			ErrCorrupt, r.ObjectKey, r.Store, n, sum, r.Bytes, r.SHA256))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	a.progress(r.Tenant, step, "checking every file against the manifest")
	m, err := a.cfg.Portability.Check(ctx, f, portability.ImportLimits{})
	if err != nil {
		return fail(fmt.Errorf("%w: %v", ErrCorrupt, err))
	}
	if !maps.Equal(m.Files, r.Manifest.Files) || m.Tenant != r.Tenant {
		return fail(fmt.Errorf("%w: the manifest of %s is not the one the archive wrote", ErrCorrupt, r.ObjectKey))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	return f, nil
}

// purge deletes the tenant's rows from the shared database: the tenant
// tables but the admin audit (a record of what the tenant's operators
// did, kept like the platform's), the relay's copy, and its export jobs.
func (a *Archiver) purge(ctx context.Context, r *Record) error {
	a.progress(r.Tenant, StepPurge, "deleting the tenant's rows")
	side := a.cfg.Side
	side.Name = placement.Pool
	pr, err := placement.PurgeTenant(ctx, side, r.Tenant, "admin_audit")
	if err != nil {
		return err
	}
	err = a.ownerTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM tenant_export_chunks c USING tenant_exports e WHERE e.id = c.job AND e.tenant = $1`, r.Tenant)
		if err != nil {
			return err
		}
		pr.Deleted["tenant_export_chunks"] = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `DELETE FROM tenant_exports WHERE tenant = $1`, r.Tenant)
		pr.Deleted["tenant_exports"] = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete the tenant's export jobs: %w", err)
	}
	r.Receipt = &Receipt{Purged: pr}
	return nil
}

// receipt writes the receipt and makes the tenant archived.
func (a *Archiver) receipt(ctx context.Context, r *Record) error {
	files := map[string]int64{}
	for name, f := range r.Manifest.Files {
		files[name] = f.Count
	}
	rc := Receipt{ArchiveID: r.ArchiveID, Tenant: r.Tenant, Store: r.Store, ObjectKey: r.ObjectKey, Bytes: r.Bytes, SHA256: r.SHA256,
		Files: files, RequestedBy: r.RequestedBy, Reason: r.Reason, At: time.Now().UTC().Truncate(time.Millisecond)}
	if r.Receipt != nil {
		rc.Purged = r.Receipt.Purged
	}
	rc.ContentHash = rc.Hash()
	if _, err := a.cfg.Directory.SetArchiveStatus(ctx, tenancy.Actor{Subject: r.RequestedBy}, "set_archived", r.Tenant, tenancy.StatusArchived, r.Reason); err != nil {
		return err
	}
	now := time.Now().UTC()
	r.Receipt, r.Phase, r.FinishedAt = &rc, PhaseArchived, &now
	return nil
}
