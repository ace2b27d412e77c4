// Package archive moves a cold tenant's whole state to object storage and
// brings it back (issue 32 §3; docs/tenants.md, "Archive").
//
// An archive is a resumable workflow whose steps are recorded in the
// tenant's tenant_archives row as each is done:
//
//  1. fence: the tenant becomes archiving (audited; the log refuses its
//     events from then on, migration 019), every serving process
//     acknowledges it, the work already going on the tenant ends
//     (tenancy.Fence, as an erasure's), and the tenant has no process
//     work pending (an archive does not carry process managers' state);
//  2. upload: the tenant's export (package portability's format: the
//     manifest with every file's count and SHA-256) is written to the
//     store under Prefix(tenant), its size and SHA-256 recorded;
//  3. verify: the object is read back whole, its bytes' SHA-256 compared
//     with the recorded one and every file with the manifest (an
//     import's first pass, writing nothing). Nothing is destroyed before
//     this step is done;
//  4. purge: every row of the tenant in the shared database's tenant
//     tables, its export jobs and the relay's copy are deleted and counted
//     again (placement.PurgeTenant); the directory row, the audit trails
//     and this workflow's row stay;
//  5. receipt: the receipt (what was written where, what was deleted, a
//     content hash) and the tenant archived.
//
// A re-hydration is the way back: the object is read and checked again
// (a corrupted or replaced object is refused before anything changes),
// the tenant becomes rehydrating and the archive is imported
// (portability.Import: the same event IDs, history no process manager or
// relay acts on again), the read models are compared with the archive's
// once the projections caught up, the tenant gets back the status it had
// before the archive, and the object is deleted. Every step of both
// workflows may be killed and run again.
package archive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/placement"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// Steps of an archive, in order.
const (
	StepFence   = "fence"
	StepUpload  = "upload"
	StepVerify  = "verify"
	StepPurge   = "purge"
	StepReceipt = "receipt"
)

// ArchiveSteps are the archive's steps in order.
var ArchiveSteps = []string{StepFence, StepUpload, StepVerify, StepPurge, StepReceipt}

// Steps of a re-hydration, in order.
const (
	StepCheck    = "check"
	StepImport   = "import"
	StepActivate = "activate"
	StepDelete   = "delete"
)

// RehydrationSteps are the re-hydration's steps in order.
var RehydrationSteps = []string{StepCheck, StepImport, StepActivate, StepDelete}

// Phases of a tenant's archive row.
const (
	PhaseArchiving   = "archiving"
	PhaseArchived    = "archived"
	PhaseRehydrating = "rehydrating"
	PhaseRehydrated  = "rehydrated"
)

// Errors.
var (
	// ErrCorrupt: the object's bytes are not those the archive recorded,
	// or a file in it differs from its manifest. Nothing was changed.
	ErrCorrupt = errors.New("the archive's object is corrupt")
	// ErrRunning: another process runs this tenant's archive or
	// re-hydration now.
	ErrRunning = errors.New("the archive of this tenant is running in another process: follow it with `strata tenants archive-status`")
	// ErrProcessWork: the tenant has process work pending (deadlines,
	// steps), which an archive does not carry.
	ErrProcessWork = fmt.Errorf("%w: the tenant has process work pending", domain.ErrRejected)
)

// lockClass is the first key of the session advisory lock that keeps one
// runner per tenant's archive ("STAR"); the second is the tenant's
// hashtext.
const lockClass int32 = 0x53544152

// Config configures an Archiver.
type Config struct {
	// Pool is the shared database's owner connection (the control plane):
	// the directory, tenant_archives, the purge as strata_eraser.
	Pool *pgxpool.Pool
	// Side is the shared database's pools, as a move's side (the purge).
	Side placement.Side
	// Directory is the tenant directory on Pool; Fence holds a tenant
	// still before its data is taken away.
	Directory *tenancy.Store
	Fence     *tenancy.Fence
	// Portability exports and imports (its Registry is required: the
	// verification checks every event through its module's codec).
	Portability *portability.Service
	// Objects is the archive store.
	Objects ObjectStore
	// CatchUp bounds the re-hydration's wait for the projections before
	// it compares the read models (default 2 minutes).
	CatchUp time.Duration
	// Progress, if set, is told of each step.
	Progress func(Progress)
	// AfterFunc, if set, runs after each step (point "after-<step>", the
	// re-hydration's "after-rehydrate-<step>"); its error stops the
	// workflow there (tests). The same points are failpoints
	// "tenancy.archive.<point>".
	AfterFunc func(ctx context.Context, tenant domain.TenantID, point string) error
}

// Progress is one report of a workflow's progress.
type Progress struct {
	Tenant  domain.TenantID `json:"tenant"`
	Step    string          `json:"step"`
	Message string          `json:"message"`
}

// Archiver archives tenants and re-hydrates them.
type Archiver struct {
	cfg Config
}

// New returns an Archiver.
func New(cfg Config) (*Archiver, error) {
	var errs []error
	if cfg.Pool == nil || cfg.Directory == nil || cfg.Fence == nil {
		errs = append(errs, errors.New("archive: the owner connection, the directory and a fence are required"))
	}
	if cfg.Side.Owner == nil || cfg.Side.App == nil {
		errs = append(errs, errors.New("archive: the shared database's pools (Side) are required"))
	}
	if cfg.Portability == nil {
		errs = append(errs, errors.New("archive: an export and import service is required"))
	}
	if cfg.Objects == nil {
		errs = append(errs, errors.New("archive: no archive store is configured (STRATA_ARCHIVE_S3_ENDPOINT and STRATA_ARCHIVE_S3_BUCKET)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.CatchUp <= 0 {
		cfg.CatchUp = 2 * time.Minute
	}
	return &Archiver{cfg: cfg}, nil
}

func (a *Archiver) progress(tenant domain.TenantID, step, msg string) {
	if a.cfg.Progress != nil {
		a.cfg.Progress(Progress{Tenant: tenant, Step: step, Message: msg})
	}
}

// point is a failpoint of the workflows.
func (a *Archiver) point(ctx context.Context, tenant domain.TenantID, name string) error {
	failpoint.Hit("tenancy.archive." + name)
	if a.cfg.AfterFunc != nil {
		if err := a.cfg.AfterFunc(ctx, tenant, name); err != nil {
			return fmt.Errorf("archive %s: at %s: %w", tenant, name, err)
		}
	}
	return nil
}

// locked runs fn holding the tenant's archive lock on a session of its
// own: a runner killed with SIGKILL leaves none behind.
func (a *Archiver) locked(ctx context.Context, tenant domain.TenantID, fn func() error) error {
	conn, err := a.cfg.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, lockClass, string(tenant)).Scan(&got); err != nil {
		return fmt.Errorf("take the archive's lock: %w", err)
	}
	if !got {
		return fmt.Errorf("archive %s: %w", tenant, ErrRunning)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, lockClass, string(tenant)); err != nil {
			conn.Conn().Close(uctx) //nolint:errcheck // a session that ends releases it
		}
	}()
	return fn()
}

// ownerTx runs fn in a transaction of the owner connection.
func (a *Archiver) ownerTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return db.OwnerTx(ctx, a.cfg.Pool, fn)
}
