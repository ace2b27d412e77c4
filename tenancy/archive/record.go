package archive

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/placement"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// Record is a tenant's archive row, as `strata tenants archive-status`
// and GET /v1/platform/tenants/{id}/archive show it.
type Record struct {
	Tenant      domain.TenantID      `json:"tenant"`
	ArchiveID   string               `json:"archive_id"`
	Phase       string               `json:"phase"`
	PriorStatus tenancy.Status       `json:"prior_status"`
	Reason      string               `json:"reason"`
	RequestedBy string               `json:"requested_by"`
	Steps       map[string]time.Time `json:"steps"`
	// Store, ObjectKey, Bytes and SHA256 say where the archive is and
	// what its bytes are, once uploaded.
	Store     string                `json:"store,omitempty"`
	ObjectKey string                `json:"object_key,omitempty"`
	Bytes     int64                 `json:"bytes,omitempty"`
	SHA256    string                `json:"sha256,omitempty"`
	Manifest  *portability.Manifest `json:"manifest,omitempty"`
	Barrier   tenancy.BarrierState  `json:"barrier"`
	Quiesce   tenancy.QuiesceState  `json:"quiesce"`
	Receipt   *Receipt              `json:"receipt,omitempty"`
	// Rehydration is the way back, once asked for.
	Rehydration *Rehydration `json:"rehydration,omitempty"`
	LastError   string       `json:"last_error,omitempty"`
	StartedAt   time.Time    `json:"started_at"`
	UpdatedAt   time.Time    `json:"updated_at"`
	FinishedAt  *time.Time   `json:"finished_at,omitempty"`
}

// NextStep is the archive's first step not done ("" when archived).
func (r Record) NextStep() string {
	for _, s := range ArchiveSteps {
		if _, ok := r.Steps[s]; !ok {
			return s
		}
	}
	return ""
}

// Receipt is what an archive wrote and deleted.
type Receipt struct {
	ArchiveID string          `json:"archive_id"`
	Tenant    domain.TenantID `json:"tenant"`
	Store     string          `json:"store"`
	ObjectKey string          `json:"object_key"`
	Bytes     int64           `json:"bytes"`
	SHA256    string          `json:"sha256"`
	// Files is the manifest's count of each file of the archive.
	Files map[string]int64 `json:"files"`
	// Purged is what the purge deleted from the shared database and the
	// check that nothing of the tenant is left there.
	Purged      placement.PurgeReceipt `json:"purged"`
	RequestedBy string                 `json:"requested_by"`
	Reason      string                 `json:"reason"`
	At          time.Time              `json:"at"`
	ContentHash string                 `json:"content_hash"`
}

// Hash is the SHA-256 of the receipt's JSON without its ContentHash.
func (r Receipt) Hash() string {
	r.ContentHash = ""
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Rehydration is a re-hydration's progress and result.
type Rehydration struct {
	RequestedBy string               `json:"requested_by"`
	Steps       map[string]time.Time `json:"steps"`
	// Import is what the import did and how the read models compared.
	Import     *portability.ImportResult `json:"import,omitempty"`
	Status     tenancy.Status            `json:"status,omitempty"` // the status the tenant got back
	FinishedAt *time.Time                `json:"finished_at,omitempty"`
}

// NextStep is the re-hydration's first step not done ("" when done).
func (r Rehydration) NextStep() string {
	for _, s := range RehydrationSteps {
		if _, ok := r.Steps[s]; !ok {
			return s
		}
	}
	return ""
}

const recordColumns = `tenant, archive_id::text, phase, prior_status, reason, requested_by, steps, store, object_key, bytes, sha256,
manifest, barrier, quiesce, receipt, rehydration, coalesce(last_error, ''), started_at, updated_at, finished_at`

// Status returns the tenant's archive row (domain.ErrNotFound when it was
// never archived).
func (a *Archiver) Status(ctx context.Context, tenant domain.TenantID) (Record, error) {
	return a.load(ctx, tenant)
}

func (a *Archiver) load(ctx context.Context, tenant domain.TenantID) (Record, error) {
	var r Record
	err := a.ownerTx(ctx, func(tx pgx.Tx) error {
		var steps, manifest, barrier, quiesce, receipt, rehydration []byte
		err := tx.QueryRow(ctx, `SELECT `+recordColumns+` FROM tenant_archives WHERE tenant = $1`, tenant).Scan(
			&r.Tenant, &r.ArchiveID, &r.Phase, &r.PriorStatus, &r.Reason, &r.RequestedBy, &steps, &r.Store, &r.ObjectKey, &r.Bytes, &r.SHA256,
			&manifest, &barrier, &quiesce, &receipt, &rehydration, &r.LastError, &r.StartedAt, &r.UpdatedAt, &r.FinishedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: tenant %q was never archived", domain.ErrNotFound, tenant)
		}
		if err != nil {
			return err
		}
		r.Steps = map[string]time.Time{}
		for _, f := range []struct {
			raw []byte
			v   any
		}{{steps, &r.Steps}, {manifest, &r.Manifest}, {barrier, &r.Barrier}, {quiesce, &r.Quiesce}, {receipt, &r.Receipt}, {rehydration, &r.Rehydration}} {
			if f.raw == nil {
				continue
			}
			if err := json.Unmarshal(f.raw, f.v); err != nil {
				return fmt.Errorf("decode tenant_archives of %s: %w", tenant, err)
			}
		}
		return nil
	})
	return r, err
}

// save writes the row's state and stamps step as done ("": no stamp).
func (a *Archiver) save(ctx context.Context, r *Record, step string) error {
	if step != "" {
		r.Steps[step] = time.Now().UTC()
	}
	js := func(v any) []byte {
		b, _ := json.Marshal(v)
		if string(b) == "null" {
			return nil
		}
		return b
	}
	return a.ownerTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `UPDATE tenant_archives SET phase = $2, steps = $3, store = $4, object_key = $5, bytes = $6, sha256 = $7,
manifest = $8, barrier = $9, quiesce = $10, receipt = $11, rehydration = $12, finished_at = $13, last_error = nullif($14, ''), updated_at = now()
WHERE tenant = $1 RETURNING updated_at`,
			r.Tenant, r.Phase, js(r.Steps), r.Store, r.ObjectKey, r.Bytes, r.SHA256, js(r.Manifest), js(r.Barrier), js(r.Quiesce),
			js(r.Receipt), js(r.Rehydration), r.FinishedAt, r.LastError).Scan(&r.UpdatedAt)
	})
}

// recordError keeps the error that stopped a workflow in its row.
func (a *Archiver) recordError(tenant domain.TenantID, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg := err.Error()
	if len(msg) > 2000 {
		msg = msg[:2000]
	}
	_ = a.ownerTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE tenant_archives SET last_error = $2, updated_at = now() WHERE tenant = $1`, tenant, msg)
		return err
	})
}

// start creates the tenant's archive row, or replaces one whose tenant
// was re-hydrated; an archive under way or done is returned as it is.
func (a *Archiver) start(ctx context.Context, who tenancy.Actor, tenant domain.TenantID, reason string) (Record, error) {
	err := a.ownerTx(ctx, func(tx pgx.Tx) error {
		var status tenancy.Status
		var placedIn string
		err := tx.QueryRow(ctx, `SELECT status, placement FROM tenants WHERE id = $1 FOR UPDATE`, tenant).Scan(&status, &placedIn)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no tenant %q in the directory", domain.ErrNotFound, tenant)
		}
		if err != nil {
			return err
		}
		var phase string
		err = tx.QueryRow(ctx, `SELECT phase FROM tenant_archives WHERE tenant = $1`, tenant).Scan(&phase)
		switch {
		case err == nil && phase != PhaseRehydrated:
			return nil // under way, or archived: the caller resumes or returns it
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if status != tenancy.StatusActive && status != tenancy.StatusSuspended {
			return fmt.Errorf("%w: tenant %s is %s; only an active or suspended tenant can be archived", domain.ErrRejected, tenant, status)
		}
		if placedIn != placement.Pool {
			return fmt.Errorf("%w: tenant %s is placed in %s; archiving a tenant outside the shared database is not supported yet", domain.ErrRejected, tenant, placedIn)
		}
		var id [16]byte
		_, _ = rand.Read(id[:])
		id[6] = id[6]&0x0f | 0x40
		id[8] = id[8]&0x3f | 0x80
		_, err = tx.Exec(ctx, `INSERT INTO tenant_archives (tenant, archive_id, phase, prior_status, reason, requested_by)
VALUES ($1, $2::uuid, 'archiving', $3, $4, $5)
ON CONFLICT (tenant) DO UPDATE SET archive_id = EXCLUDED.archive_id, phase = 'archiving', prior_status = EXCLUDED.prior_status,
  reason = EXCLUDED.reason, requested_by = EXCLUDED.requested_by, steps = '{}', store = '', object_key = '', bytes = 0, sha256 = '',
  manifest = NULL, barrier = '{}', quiesce = '{}', receipt = NULL, rehydration = NULL, last_error = NULL, started_at = now(),
  updated_at = now(), finished_at = NULL`,
			tenant, hex.EncodeToString(id[:]), status, reason, who.Subject)
		return err
	})
	if err != nil {
		return Record{}, err
	}
	return a.load(ctx, tenant)
}
