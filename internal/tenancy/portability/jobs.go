package portability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// Jobs runs export jobs in this process and reads every process's.
type Jobs struct {
	svc    *Service
	ctx    context.Context // the process's lifetime: a job stops with it
	logger *slog.Logger
	wg     sync.WaitGroup
}

// NewJobs returns Jobs running exports with svc until ctx ends.
func NewJobs(ctx context.Context, svc *Service, logger *slog.Logger) *Jobs {
	if logger == nil {
		logger = slog.Default()
	}
	return &Jobs{svc: svc, ctx: ctx, logger: logger}
}

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

const jobColumns = `id::text, tenant, CASE WHEN status = 'running' AND heartbeat_at < now() - $3::interval THEN 'failed' ELSE status END,
requested_by, progress, manifest, coalesce(CASE WHEN status = 'running' AND heartbeat_at < now() - $3::interval
THEN 'the process running the export stopped (no heartbeat since ' || heartbeat_at || '); start another' ELSE error END, ''),
bytes, created_at, heartbeat_at, finished_at`

// Get returns a job of tenant.
func (j *Jobs) Get(ctx context.Context, tenant domain.TenantID, id string) (Job, error) {
	if _, err := uuid.Parse(id); err != nil {
		return Job{}, ErrJobNotFound
	}
	var out Job
	err := j.svc.ownerTx(ctx, func(tx pgx.Tx) error {
		var progress, manifest []byte
		err := tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM tenant_exports WHERE id = $1 AND tenant = $2`, id, tenant, StaleAfter.String()).
			Scan(&out.ID, &out.Tenant, &out.Status, &out.RequestedBy, &progress, &manifest, &out.Error, &out.Bytes, &out.CreatedAt, &out.HeartbeatAt, &out.FinishedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrJobNotFound
		}
		if err != nil {
			return err
		}
		_ = json.Unmarshal(progress, &out.Progress)
		if manifest != nil {
			out.Manifest = new(Manifest)
			if err := json.Unmarshal(manifest, out.Manifest); err != nil {
				return err
			}
		}
		return nil
	})
	out.CreatedAt, out.HeartbeatAt = out.CreatedAt.UTC(), out.HeartbeatAt.UTC()
	if out.FinishedAt != nil {
		t := out.FinishedAt.UTC()
		out.FinishedAt = &t
	}
	return out, err
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

// Audit records a platform call about a tenant's exports.
func (j *Jobs) Audit(ctx context.Context, actor, action string, tenant domain.TenantID, detail map[string]any) error {
	return j.svc.WithActor(actor, nil).audit(ctx, action, tenant, detail)
}
