package portability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
)

// Export jobs (the platform API's POST /v1/platform/tenants/{id}/exports).
// A job's state is a row of tenant_exports and its archive is stored in
// tenant_export_chunks, both on the owner connection: any serving process
// with the owner connection answers a job's status and serves its archive,
// whichever process ran it. The process that started a job runs it; its
// heartbeat (every progress report, at least every HeartbeatEvery) tells a
// reader whether it still does: a running job whose heartbeat is older than
// StaleAfter is shown as failed ("the process running it stopped"). Nothing
// resumes an abandoned job: start another.
const (
	HeartbeatEvery = 5 * time.Second
	StaleAfter     = 30 * time.Second
	chunkSize      = 1 << 20
)

// Defaults of JobsConfig.
const (
	DefaultMaxRunningPerTenant = 1
	DefaultMaxRunning          = 2
	DefaultRetention           = 24 * time.Hour
)

// busyRetryAfter is the Retry-After of a start refused by the cap: an
// export of a small tenant takes seconds, a large one minutes.
const busyRetryAfter = 10 * time.Second

// startLockClass ("STEX") is the transaction advisory lock every start
// takes before it counts the running jobs, so that two starts on two
// processes cannot both see a free slot.
const startLockClass int32 = 0x53544558

// JobsConfig configures Jobs.
type JobsConfig struct {
	// MaxRunningPerTenant is how many export jobs of one tenant may run at
	// once, counted in the database (every process together); a start
	// beyond it is refused with a *BusyError. Default
	// DefaultMaxRunningPerTenant.
	MaxRunningPerTenant int
	// MaxRunning is how many export jobs of all tenants may run at once on
	// the database. A running job holds a connection of the serving pools
	// (strata_app while it reads the log, strata_projector while it reads
	// the read models) and a core while it compresses: 30 unbounded jobs
	// took another tenant's queries from about 1 ms to 340 ms (issue 29).
	// Default DefaultMaxRunning.
	MaxRunning int
	// Retention is how long a job that ended (done, failed, or running
	// without a heartbeat) is kept, archive included, after it ended. Get
	// and Archive answer ErrJobNotFound beyond it at once; Expire deletes
	// the rows. Default DefaultRetention.
	Retention time.Duration
	Logger    *slog.Logger
}

func (c *JobsConfig) setDefaults() {
	if c.MaxRunningPerTenant == 0 {
		c.MaxRunningPerTenant = DefaultMaxRunningPerTenant
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = DefaultMaxRunning
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks c after its defaults.
func (c JobsConfig) Validate() error {
	var errs []error
	if c.MaxRunningPerTenant < 1 {
		errs = append(errs, errors.New("export jobs: the running jobs per tenant must be at least 1"))
	}
	if c.MaxRunning < c.MaxRunningPerTenant {
		errs = append(errs, fmt.Errorf("export jobs: the running jobs in all (%d) must be at least those per tenant (%d)", c.MaxRunning, c.MaxRunningPerTenant))
	}
	if c.Retention < time.Minute {
		errs = append(errs, errors.New("export jobs: the retention must be at least a minute (an archive must outlive its download)"))
	}
	return errors.Join(errs...)
}

// Job states.
const (
	JobRunning = "running"
	JobDone    = "done"
	JobFailed  = "failed"
)

// Job is an export job as the API shows it.
type Job struct {
	ID          string          `json:"id"`
	Tenant      domain.TenantID `json:"tenant"`
	Status      string          `json:"status"`
	RequestedBy string          `json:"requested_by"`
	Progress    Progress        `json:"progress"`
	Manifest    *Manifest       `json:"manifest,omitempty"`
	Error       string          `json:"error,omitempty"`
	Bytes       int64           `json:"bytes"`
	CreatedAt   time.Time       `json:"created_at"`
	HeartbeatAt time.Time       `json:"heartbeat_at"`
	FinishedAt  *time.Time      `json:"finished_at,omitempty"`
}

// ErrJobNotFound: no such job of that tenant.
var ErrJobNotFound = fmt.Errorf("%w: no such export job", domain.ErrNotFound)

// ErrJobNotDone: the archive of a job that is not done.
var ErrJobNotDone = fmt.Errorf("%w: the export is not done", domain.ErrRejected)

// ErrJobRunning: the deletion of a job that still runs.
var ErrJobRunning = fmt.Errorf("%w: the export is running; delete it once it is done", domain.ErrRejected)

// ErrBusy: a start refused by the cap of running jobs (*BusyError says
// which).
var ErrBusy = errors.New("too many export jobs running")

// BusyError is a start refused because MaxRunningPerTenant jobs of the
// tenant (PerTenant) or MaxRunning jobs in all already run.
type BusyError struct {
	Tenant     domain.TenantID
	PerTenant  bool
	Max        int
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	if e.PerTenant {
		return fmt.Sprintf("tenant %s already has %d export job(s) running, the most one tenant may: retry when it is done", e.Tenant, e.Max)
	}
	return fmt.Sprintf("%d export jobs are running, the most this installation runs at once: retry later", e.Max)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// canonicalJobID is the only spelling of a job ID the API takes: a UUID in
// lower case with hyphens, as uuid.NewString writes it. uuid.Parse also
// takes "urn:uuid:…", braces, upper case and bare hex, which PostgreSQL's
// uuid input partly refuses (urn:uuid: answered 500) and partly takes
// (another spelling reached the job).
var canonicalJobID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// ValidJobID reports whether id is a job ID as the API writes them.
func ValidJobID(id string) bool { return canonicalJobID.MatchString(id) }

// Jobs runs export jobs in this process and reads every process's.
type Jobs struct {
	svc    *Service
	ctx    context.Context // the process's lifetime: a job stops with it
	cfg    JobsConfig
	logger *slog.Logger
	wg     sync.WaitGroup
}

// NewJobs returns Jobs running exports with svc until ctx ends.
func NewJobs(ctx context.Context, svc *Service, cfg JobsConfig) (*Jobs, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Jobs{svc: svc, ctx: ctx, cfg: cfg, logger: cfg.Logger}, nil
}

// Config returns the configuration in force (defaults applied).
func (j *Jobs) Config() JobsConfig { return j.cfg }

// Wait waits for the jobs this process runs (tests).
func (j *Jobs) Wait() { j.wg.Wait() }

// Start checks that tenant can be exported and starts a job, which runs in
// the background; the returned Job is its first state.
func (j *Jobs) Start(ctx context.Context, actor string, tenant domain.TenantID) (Job, error) {
	status, _, ok, err := j.svc.directoryEntry(ctx, tenant)
	if err != nil {
		return Job{}, err
	}
	if !ok {
		return Job{}, fmt.Errorf("%w: no tenant %q in the directory", domain.ErrNotFound, tenant)
	}
	if status == "erased" {
		return Job{}, fmt.Errorf("%w: tenant %s is erased: there is nothing to export", domain.ErrRejected, tenant)
	}
	id := uuid.NewString()
	err = j.svc.ownerTx(ctx, func(tx pgx.Tx) error {
		// The count and the insert must not interleave with another
		// process's start: one start at a time per database.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, startLockClass); err != nil {
			return err
		}
		// The tenant's row is read again, locked FOR SHARE until the job's
		// row commits: an erasure setting the tenant erasing either waits
		// for this start (and its quiescence then finds the job running
		// and waits for it) or came first (and the job is refused). Read
		// outside this transaction, a job could start after the erasure's
		// quiescence looked and write chunks behind its verification.
		var cur string
		if err := tx.QueryRow(ctx, `SELECT status FROM tenants WHERE id = $1 FOR SHARE`, tenant).Scan(&cur); err != nil {
			return err
		}
		if cur == "erasing" || cur == "erased" {
			return fmt.Errorf("%w: tenant %s is %s: it cannot be exported", domain.ErrRejected, tenant, cur)
		}
		var mine, all int
		if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tenant = $1), count(*) FROM tenant_exports
WHERE status = 'running' AND heartbeat_at >= now() - $2::float8 * interval '1 second'`, tenant, StaleAfter.Seconds()).Scan(&mine, &all); err != nil {
			return err
		}
		switch {
		case mine >= j.cfg.MaxRunningPerTenant:
			return &BusyError{Tenant: tenant, PerTenant: true, Max: j.cfg.MaxRunningPerTenant, RetryAfter: busyRetryAfter}
		case all >= j.cfg.MaxRunning:
			return &BusyError{Tenant: tenant, Max: j.cfg.MaxRunning, RetryAfter: busyRetryAfter}
		}
		_, err := tx.Exec(ctx, `INSERT INTO tenant_exports (id, tenant, requested_by) VALUES ($1, $2, $3)`, id, tenant, actor)
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("record the export job: %w", err)
	}
	j.wg.Add(1)
	go func() {
		defer j.wg.Done()
		j.run(actor, id, tenant)
	}()
	return j.Get(ctx, tenant, id)
}

// run exports into the job's chunks and records the outcome.
func (j *Jobs) run(actor, id string, tenant domain.TenantID) {
	ctx := j.ctx
	var mu sync.Mutex
	var last time.Time
	beat := func(p *Progress) {
		mu.Lock()
		defer mu.Unlock()
		if p == nil && time.Since(last) < HeartbeatEvery || p != nil && time.Since(last) < time.Second {
			return
		}
		last = time.Now()
		var raw []byte
		if p != nil {
			raw, _ = json.Marshal(p)
		}
		err := j.svc.ownerTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE tenant_exports SET heartbeat_at = now(), progress = coalesce($2::jsonb, progress) WHERE id = $1 AND status = 'running'`, id, raw)
			return err
		})
		if err != nil && ctx.Err() == nil {
			j.logger.Warn("export job heartbeat", "job", id, "error", err.Error())
		}
	}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				beat(nil)
			}
		}
	}()
	cw := &chunkWriter{ctx: ctx, svc: j.svc, job: id, buf: make([]byte, 0, chunkSize)}
	svc := j.svc.WithActor(actor, func(p Progress) { beat(&p) })
	m, err := svc.Export(ctx, tenant, cw)
	if err == nil {
		err = cw.flush()
	}
	close(stop)
	fctx := context.WithoutCancel(ctx) // record the outcome even while stopping
	if err != nil {
		msg := clientMessage(err)
		j.logger.Error("export job failed", "job", id, "tenant", string(tenant), "error", err.Error())
		ferr := j.svc.ownerTx(fctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(fctx, `DELETE FROM tenant_export_chunks WHERE job = $1`, id); err != nil {
				return err
			}
			_, err := tx.Exec(fctx, `UPDATE tenant_exports SET status = 'failed', error = $2, finished_at = now(), heartbeat_at = now() WHERE id = $1`, id, msg)
			return err
		})
		if ferr != nil {
			j.logger.Error("record the export job's failure", "job", id, "error", ferr.Error())
		}
		return
	}
	raw, _ := json.Marshal(m)
	ferr := j.svc.ownerTx(fctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(fctx, `UPDATE tenant_exports SET status = 'done', manifest = $2, bytes = $3, finished_at = now(), heartbeat_at = now(),
progress = jsonb_build_object('phase', 'done') WHERE id = $1`, id, raw, cw.total)
		return err
	})
	if ferr != nil {
		j.logger.Error("record the export job's result", "job", id, "error", ferr.Error())
	}
}

// clientMessage is what a job's reader may see of its error: the
// message of a domain error, never a database's text.
func clientMessage(err error) string {
	for _, kind := range []error{domain.ErrNotFound, domain.ErrRejected, domain.ErrInvalid} {
		if errors.Is(err, kind) {
			msg := err.Error()
			if i := strings.LastIndex(msg, kind.Error()+": "); i >= 0 {
				return msg[i+len(kind.Error())+2:]
			}
			return msg
		}
	}
	if errors.Is(err, context.Canceled) {
		return "the process running the export stopped; start another"
	}
	if errors.Is(err, ErrNotCaughtUp) {
		return "the projections did not reach the tenant's last event in time: is a projector running?"
	}
	return "internal error (the server's log has the detail)"
}

// chunkWriter stores an archive as rows of tenant_export_chunks.
type chunkWriter struct {
	ctx   context.Context
	svc   *Service
	job   string
	seq   int
	buf   []byte
	total int64
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := chunkSize - len(c.buf)
		if room > len(p) {
			room = len(p)
		}
		c.buf = append(c.buf, p[:room]...)
		p = p[room:]
		if len(c.buf) == chunkSize {
			if err := c.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	err := c.svc.ownerTx(c.ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(c.ctx, `INSERT INTO tenant_export_chunks (job, seq, data) VALUES ($1, $2, $3)`, c.job, c.seq, c.buf)
		return err
	})
	if err != nil {
		return fmt.Errorf("store the archive: %w", err)
	}
	c.total += int64(len(c.buf))
	c.seq++
	c.buf = c.buf[:0]
	return nil
}

// jobColumns are a Job's columns; $3 is StaleAfter in seconds.
const jobColumns = `id::text, tenant, CASE WHEN status = 'running' AND heartbeat_at < now() - $3::float8 * interval '1 second' THEN 'failed' ELSE status END,
requested_by, progress, manifest, coalesce(CASE WHEN status = 'running' AND heartbeat_at < now() - $3::float8 * interval '1 second'
THEN 'the process running the export stopped (no heartbeat since ' || heartbeat_at || '); start another' ELSE error END, ''),
bytes, created_at, heartbeat_at, finished_at`

// retained is the condition of a job within the retention ($4, seconds):
// it ended (or, running without a process, last beat) less than that ago.
const retained = `coalesce(finished_at, heartbeat_at) >= now() - $4::float8 * interval '1 second'`

// Get returns a job of tenant (ErrJobNotFound for an ID that is not
// canonical, another tenant's job and one beyond the retention).
func (j *Jobs) Get(ctx context.Context, tenant domain.TenantID, id string) (Job, error) {
	var out Job
	err := j.svc.ownerTx(ctx, func(tx pgx.Tx) (err error) {
		out, err = j.get(ctx, tx, tenant, id, "")
		return err
	})
	return out, err
}

func (j *Jobs) get(ctx context.Context, tx pgx.Tx, tenant domain.TenantID, id, lock string) (Job, error) {
	var out Job
	if !ValidJobID(id) {
		return out, ErrJobNotFound
	}
	var progress, manifest []byte
	err := tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM tenant_exports WHERE id = $1 AND tenant = $2 AND `+retained+lock,
		id, tenant, StaleAfter.Seconds(), j.cfg.Retention.Seconds()).
		Scan(&out.ID, &out.Tenant, &out.Status, &out.RequestedBy, &progress, &manifest, &out.Error, &out.Bytes, &out.CreatedAt, &out.HeartbeatAt, &out.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, ErrJobNotFound
	}
	if err != nil {
		return out, err
	}
	_ = json.Unmarshal(progress, &out.Progress)
	if manifest != nil {
		out.Manifest = new(Manifest)
		if err := json.Unmarshal(manifest, out.Manifest); err != nil {
			return out, err
		}
	}
	out.CreatedAt, out.HeartbeatAt = out.CreatedAt.UTC(), out.HeartbeatAt.UTC()
	if out.FinishedAt != nil {
		t := out.FinishedAt.UTC()
		out.FinishedAt = &t
	}
	return out, nil
}

// Delete deletes a job of tenant that is not running, archive included,
// and returns it as it was (ErrJobNotFound as Get, ErrJobRunning).
func (j *Jobs) Delete(ctx context.Context, tenant domain.TenantID, id string) (Job, error) {
	var out Job
	err := j.svc.ownerTx(ctx, func(tx pgx.Tx) (err error) {
		if out, err = j.get(ctx, tx, tenant, id, ` FOR UPDATE`); err != nil {
			return err
		}
		if out.Status == JobRunning {
			return ErrJobRunning
		}
		_, err = tx.Exec(ctx, `DELETE FROM tenant_exports WHERE id = $1`, id) // its chunks: ON DELETE CASCADE
		return err
	})
	if err != nil {
		return Job{}, fmt.Errorf("delete export job %s: %w", id, err)
	}
	return out, nil
}

// ExpireSubject is who tenant_audit names for an export deleted by Expire.
const ExpireSubject = "serve:export-retention"

// Expire deletes every job, archive included, that ended longer than the
// retention ago, one job per transaction, each recorded in tenant_audit
// (export_expire) in the same transaction; it returns how many. Serving
// processes call it on a timer; two at once delete each job once (SKIP
// LOCKED). The jobs of a tenant being erased are the erasure's (it counts
// and deletes them for its receipt); those of an erased tenant are deleted
// without a row naming the tenant, which the erasure anonymized.
func (j *Jobs) Expire(ctx context.Context) (int, error) {
	n := 0
	for {
		gone := false
		err := j.svc.ownerTx(ctx, func(tx pgx.Tx) error {
			var id, tenant, status string
			err := tx.QueryRow(ctx, `DELETE FROM tenant_exports x WHERE x.id = (
  SELECT e.id FROM tenant_exports e WHERE NOT (`+strings.ReplaceAll(retained, "$4", "$1")+`)
    AND NOT EXISTS (SELECT 1 FROM tenants t WHERE t.id = e.tenant AND t.status = 'erasing')
  ORDER BY e.created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING x.id::text, x.tenant, coalesce((SELECT t.status FROM tenants t WHERE t.id = x.tenant), '')`, j.cfg.Retention.Seconds()).Scan(&id, &tenant, &status)
			if errors.Is(err, pgx.ErrNoRows) {
				gone = true
				return nil
			}
			if err != nil || status == "erased" {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO tenant_audit (subject, action, tenant, detail) VALUES ($1, 'export_expire', $2, jsonb_build_object('job', $3::text))`,
				ExpireSubject, tenant, id)
			return err
		})
		if err != nil {
			return n, fmt.Errorf("expire export jobs: %w", err)
		}
		if gone {
			return n, nil
		}
		n++
	}
}

// Archive writes a done job's archive to w (ErrJobNotDone otherwise).
// onStart runs once the job is known to be done, before the first byte.
func (j *Jobs) Archive(ctx context.Context, tenant domain.TenantID, id string, onStart func(Job), w io.Writer) error {
	job, err := j.Get(ctx, tenant, id)
	if err != nil {
		return err
	}
	if job.Status != JobDone {
		return fmt.Errorf("%w: export job %s is %s; its archive is ready when its status is done", ErrJobNotDone, id, job.Status)
	}
	onStart(job)
	for seq := 0; ; seq++ {
		var data []byte
		err := j.svc.ownerTx(ctx, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT data FROM tenant_export_chunks WHERE job = $1 AND seq = $2`, id, seq).Scan(&data)
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
}
