// Package subjects forgets one data subject of a tenant (issue 30;
// ARCHITECTURE decision 16; docs/personal-data.md, "Forget a subject"):
// the subject's data key is destroyed, which shreds every field it sealed
// wherever the event went (the log, dead letters, the broker), and what
// holds the subject's data opened is dealt with store by store: the
// idempotency records of the subject's commands deleted, the tenant's
// stored export archives deleted, the tenant's read models rebuilt from
// the log (the subject's fields read as their tombstones there, exactly
// as any later rebuild will). Each step commits with its record in
// subject_erasures; a run stopped anywhere is resumed by running it again,
// and ends with the same receipt.
package subjects

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/personal"
	"github.com/strata-es/strata/projections/relay"
)

// The steps of an erasure, in order.
const (
	StepDestroy     = "destroy"     // the key: the log's, dead letters' and broker's copies shredded
	StepIdempotency = "idempotency" // the records of the subject's commands deleted
	StepRedact      = "redact"      // plaintext outside the log: process instances tombstoned, free text cleared (redact.go)
	StepExports     = "exports"     // the tenant's stored export archives deleted
	StepReadModels  = "read_models" // the tenant's read models rebuilt: the subject's fields tombstoned
	StepNotice      = "notice"      // consumers of the broker told (Config.Announce)
	StepReceipt     = "receipt"
)

// Steps lists the steps in order.
var Steps = []string{StepDestroy, StepIdempotency, StepRedact, StepExports, StepReadModels, StepNotice, StepReceipt}

// The modes a store is dealt with in.
const (
	ModeShredded   = "shredded"   // its copies are sealed with the destroyed key
	ModeDeleted    = "deleted"    // its rows are gone
	ModeBeyondUse  = "beyond_use" // kept where strata cannot reach, unusable until Until (backups)
	ModeTombstoned = "tombstoned" // rebuilt or redacted in place: the subject's fields hold the declared tombstones
	ModeNotified   = "notified"   // copies beyond strata: their holders were sent the erasure's notice
)

// Config configures an Eraser.
type Config struct {
	// Owner is the owner connection of the tenant's database: it becomes
	// strata_eraser for the tenant's rows and strata_owner for the export
	// archives.
	Owner *pgxpool.Pool
	// Rebuild rebuilds every projection's rows of the tenant from the log
	// and returns how many projections it rebuilt.
	Rebuild func(ctx context.Context, tenant string) (int, error)
	// BackupRetention is how long the deployment keeps its backups (base
	// backups, archived WAL): those taken before the key was destroyed
	// still hold it, beyond use until they expire. Zero: unknown, and the
	// receipt says so instead of a date.
	BackupRetention time.Duration
	// Registry holds the events' personal declarations (Verify checks the
	// subject's streams for declared fields in plaintext); nil: it does not.
	Registry *event.Registry
	// Processes are the declared personal fields of the process managers'
	// instances (process.Definition.Personal), by process name.
	Processes map[string][]event.PersonalField
	// Announce, if set, publishes the erasure's notice to the broker the
	// relay publishes the tenant's events to (relay.Notices), in tx, the
	// step's transaction on an owner connection, and says where it went:
	// consumers that stored opened fields of the key forget them. Nil: the
	// relay is off, and the receipt says no notice was sent.
	Announce func(ctx context.Context, tx pgx.Tx, n Notice) (where string, err error)
	// Broker, if set, reads what the broker holds of the tenant
	// (relay.ReadNATS, relay.ReadSQL): Verify looks in its messages for
	// the subject's ID and, on the subject's streams, for declared fields
	// in plaintext.
	Broker func(ctx context.Context, tenant string, fn func(relay.Held) error) error
	// After, if set, is called after each step has committed; an error
	// stops the erasure there (the fault tests stop it after every step).
	After func(step string) error
	// Progress, if set, is told of each step as it starts.
	Progress func(step string)
}

// Request asks to forget one subject of a tenant.
type Request struct {
	Tenant  domain.TenantID
	Subject string
	Reason  string
	Actor   string // who asked
}

// Notice is what an erasure's notice says: which erasure, the destroyed
// key (named in every field it sealed) and the subject's pseudonym.
type Notice struct {
	ErasureID, Tenant, KeyID, Pseudonym string
	At                                  time.Time // when the erasure was asked for
}

// Store is what one store held of the subject and how it was dealt with.
type Store struct {
	Name  string `json:"name"`
	Mode  string `json:"mode"`
	Count int64  `json:"count"`
	Note  string `json:"note,omitempty"`
	// Until is when a store kept beyond use stops holding the data.
	Until *time.Time `json:"until,omitempty"`
}

// Receipt is the record of a finished erasure. ContentHash is the SHA-256
// of the receipt's JSON without it.
type Receipt struct {
	ErasureID   string    `json:"erasure_id"`
	Tenant      string    `json:"tenant"`
	SubjectHash string    `json:"subject_hash"`
	KeyID       string    `json:"key_id"`
	Pseudonym   string    `json:"pseudonym"`
	Reason      string    `json:"reason"`
	RequestedBy string    `json:"requested_by"`
	Stores      []Store   `json:"stores"`
	StartedAt   time.Time `json:"started_at"`
	ContentHash string    `json:"content_hash,omitempty"`
}

// Eraser runs subject erasures.
type Eraser struct{ cfg Config }

// New returns an Eraser.
func New(cfg Config) (*Eraser, error) {
	if cfg.Owner == nil {
		return nil, errors.New("subjects: Config.Owner is required")
	}
	return &Eraser{cfg: cfg}, nil
}

// ErrInvalid: the request is malformed.
var ErrInvalid = errors.New("invalid subject erasure")

// record is a subject_erasures row.
type record struct {
	id, keyID, reason, actor string
	steps                    map[string]time.Time
	stores                   map[string]Store
	receipt                  *Receipt
	started                  time.Time
}

// Status is where an erasure is.
type Status struct {
	ErasureID string    `json:"erasure_id"`
	StepsDone []string  `json:"steps_done"`
	Finished  bool      `json:"finished"`
	StartedAt time.Time `json:"started_at"`
	Receipt   *Receipt  `json:"receipt,omitempty"`
}

// ErrNotFound: no erasure of the tenant has that ID.
var ErrNotFound = errors.New("subject erasure not found")

func (r *record) status() Status {
	if r.id == "" && r.receipt != nil { // a finished erasure, asked for again
		return Status{ErasureID: r.receipt.ErasureID, StepsDone: slices.Clone(Steps), Finished: true, StartedAt: r.receipt.StartedAt, Receipt: r.receipt}
	}
	st := Status{ErasureID: r.id, StepsDone: []string{}, StartedAt: r.started.UTC(), Receipt: r.receipt, Finished: r.receipt != nil}
	for _, s := range Steps {
		if _, ok := r.steps[s]; ok {
			st.StepsDone = append(st.StepsDone, s)
		}
	}
	return st
}

func (req Request) check() error {
	if _, err := domain.ParseTenantID(string(req.Tenant)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if req.Subject == "" || len(req.Subject) > 1000 {
		return fmt.Errorf("%w: a subject ID is 1 to 1000 bytes", ErrInvalid)
	}
	if req.Reason == "" || len(req.Reason) > 500 || req.Actor == "" {
		return fmt.Errorf("%w: a reason (1 to 500 characters) and the requester are required", ErrInvalid)
	}
	return nil
}

// Begin starts the subject's erasure (or finds the one under way, or the
// finished one when nothing of the subject is left) without running a
// step: a caller that runs Erase in the background answers with it.
func (e *Eraser) Begin(ctx context.Context, req Request) (Status, error) {
	if err := req.check(); err != nil {
		return Status{}, err
	}
	if _, err := db.EnsureEraserGrants(ctx, e.cfg.Owner); err != nil {
		return Status{}, err
	}
	rec, err := e.begin(ctx, string(req.Tenant), personal.SubjectHash(string(req.Tenant), req.Subject), req)
	if err != nil {
		return Status{}, err
	}
	return rec.status(), nil
}

// Status returns the tenant's erasure id.
func (e *Eraser) Status(ctx context.Context, tenant domain.TenantID, id string) (Status, error) {
	var st Status
	err := e.eraserTx(ctx, string(tenant), func(tx pgx.Tx) error {
		var rec record
		var steps, receipt []byte
		err := tx.QueryRow(ctx, `SELECT erasure_id::text, steps, receipt, started_at FROM subject_erasures WHERE tenant_id = $1 AND erasure_id::text = $2`,
			string(tenant), id).Scan(&rec.id, &steps, &receipt, &rec.started)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(steps, &rec.steps); err != nil {
			return err
		}
		if receipt != nil {
			rec.receipt = &Receipt{}
			if err := json.Unmarshal(receipt, rec.receipt); err != nil {
				return err
			}
		}
		st = rec.status()
		return nil
	})
	return st, err
}

// Erase forgets the subject, resuming the subject's unfinished erasure if
// there is one, and returns the receipt.
func (e *Eraser) Erase(ctx context.Context, req Request) (Receipt, error) {
	if err := req.check(); err != nil {
		return Receipt{}, err
	}
	if e.cfg.Rebuild == nil {
		return Receipt{}, errors.New("subjects: an erasure needs Config.Rebuild")
	}
	tenant := string(req.Tenant)
	hash := personal.SubjectHash(tenant, req.Subject)
	if _, err := db.EnsureEraserGrants(ctx, e.cfg.Owner); err != nil {
		return Receipt{}, err
	}
	rec, err := e.begin(ctx, tenant, hash, req)
	if err != nil {
		return Receipt{}, err
	}
	if rec.receipt != nil {
		return *rec.receipt, nil
	}
	for _, step := range Steps {
		if _, done := rec.steps[step]; done {
			continue
		}
		if e.cfg.Progress != nil {
			e.cfg.Progress(step)
		}
		if err := e.run(ctx, step, tenant, hash, req.Subject, rec); err != nil {
			return Receipt{}, fmt.Errorf("erase a subject of %s: step %s: %w", tenant, step, err)
		}
		if e.cfg.After != nil {
			if err := e.cfg.After(step); err != nil {
				return Receipt{}, fmt.Errorf("erase a subject of %s: after %s: %w", tenant, step, err)
			}
		}
	}
	return *rec.receipt, nil
}

// begin finds the subject's unfinished erasure or starts one.
func (e *Eraser) begin(ctx context.Context, tenant, hash string, req Request) (*record, error) {
	var rec *record
	err := e.eraserTx(ctx, tenant, func(tx pgx.Tx) error {
		var err error
		if rec, err = load(ctx, tx, tenant, hash); err != nil || rec != nil {
			return err
		}
		// Nothing of the subject's is left to forget (no key since the
		// last erasure): the request is that erasure's again, a rerun
		// after it finished. It gets its receipt.
		var hasKey bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM subject_keys WHERE tenant_id = $1 AND subject_hash = $2)`, tenant, hash).Scan(&hasKey); err != nil {
			return err
		}
		if !hasKey {
			var raw []byte
			err := tx.QueryRow(ctx, `SELECT receipt FROM subject_erasures WHERE tenant_id = $1 AND subject_hash = $2 AND finished_at IS NOT NULL
ORDER BY finished_at DESC LIMIT 1`, tenant, hash).Scan(&raw)
			if err == nil {
				rec = &record{receipt: &Receipt{}}
				return json.Unmarshal(raw, rec.receipt)
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		raw := make([]byte, 16)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		raw[6], raw[8] = raw[6]&0x0f|0x40, raw[8]&0x3f|0x80
		id := fmt.Sprintf("%x-%x-%x-%x-%x", raw[0:4], raw[4:6], raw[6:8], raw[8:10], raw[10:])
		if _, err := tx.Exec(ctx, `INSERT INTO subject_erasures (tenant_id, erasure_id, subject_hash, reason, requested_by) VALUES ($1, $2, $3, $4, $5)`,
			tenant, id, hash, req.Reason, req.Actor); err != nil {
			return err
		}
		rec, err = load(ctx, tx, tenant, hash)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start the erasure: %w", err)
	}
	return rec, nil
}

func load(ctx context.Context, tx pgx.Tx, tenant, hash string) (*record, error) {
	var rec record
	var steps, stores []byte
	err := tx.QueryRow(ctx, `SELECT erasure_id::text, key_id, reason, requested_by, steps, stores, started_at FROM subject_erasures
WHERE tenant_id = $1 AND subject_hash = $2 AND finished_at IS NULL`, tenant, hash).
		Scan(&rec.id, &rec.keyID, &rec.reason, &rec.actor, &steps, &stores, &rec.started)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(steps, &rec.steps); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(stores, &rec.stores); err != nil {
		return nil, err
	}
	return &rec, nil
}

// done records step and the stores it dealt with in tx (the eraser's,
// under the tenant), with the step's own work.
func done(ctx context.Context, tx pgx.Tx, tenant string, rec *record, step string, stores ...Store) error {
	rec.steps[step] = time.Now().UTC()
	for _, s := range stores {
		rec.stores[s.Name] = s
	}
	steps, err := json.Marshal(rec.steps)
	if err != nil {
		return err
	}
	all, err := json.Marshal(rec.stores)
	if err != nil {
		return err
	}
	if _, err = tx.Exec(ctx, `UPDATE subject_erasures SET steps = $3, stores = $4, key_id = $5 WHERE tenant_id = $1 AND erasure_id = $2`,
		tenant, rec.id, steps, all, rec.keyID); err != nil {
		return err
	}
	// The fault tests kill the process here: the step's work and its
	// record are written, not committed.
	failpoint.Hit("subjects." + step)
	return nil
}

func (e *Eraser) run(ctx context.Context, step, tenant, hash, subject string, rec *record) error {
	switch step {
	case StepDestroy:
		return e.eraserTx(ctx, tenant, func(tx pgx.Tx) error {
			id, err := personal.DestroyIn(ctx, tx, tenant, subject)
			if err != nil {
				return err
			}
			rec.keyID = id
			keys := Store{Name: "keys", Mode: ModeDeleted, Count: 1, Note: "the subject's data key"}
			if id == "" {
				keys.Count, keys.Note = 0, "the subject had no key: nothing of theirs was sealed, or an earlier erasure destroyed it"
			}
			stores := []Store{keys}
			for _, c := range []struct{ name, sql, note string }{
				{"log", `SELECT count(*) FROM events WHERE tenant_id = $1 AND $2 <> '' AND strpos(data::text, $2) > 0`, "events whose personal fields the key sealed"},
				{"dead_letters", `SELECT count(*) FROM dead_letters WHERE tenant_id = $1 AND $2 <> '' AND strpos(data::text, $2) > 0`, "parked copies of those events"},
			} {
				var n int64
				if err := tx.QueryRow(ctx, c.sql, tenant, id).Scan(&n); err != nil {
					return fmt.Errorf("count %s: %w", c.name, err)
				}
				stores = append(stores, Store{Name: c.name, Mode: ModeShredded, Count: n, Note: c.note})
			}
			stores = append(stores, Store{Name: "relay", Mode: ModeShredded, Count: -1,
				Note: "the broker's messages carry the fields as sealed in the log; the relay's SQL copy likewise"}, e.backups(id))
			return done(ctx, tx, tenant, rec, step, stores...)
		})
	case StepIdempotency:
		return e.eraserTx(ctx, tenant, func(tx pgx.Tx) error {
			n, err := deleteIdempotency(ctx, tx, tenant, rec.keyID)
			if err != nil {
				return err
			}
			return done(ctx, tx, tenant, rec, step, Store{Name: "idempotency_records", Mode: ModeDeleted, Count: n,
				Note: "the records of the commands whose events the key sealed (a retry finds the command in its stream's history)"})
		})
	case StepRedact:
		return e.eraserTx(ctx, tenant, func(tx pgx.Tx) error {
			streams, err := subjectStreams(ctx, tx, tenant, rec.keyID)
			if err != nil {
				return err
			}
			instances, err := redactProcesses(ctx, tx, tenant, streams, e.cfg.Processes, event.PseudonymOf(rec.keyID))
			if err != nil {
				return err
			}
			letters, err := redactDeadLetterErrors(ctx, tx, tenant, streams)
			if err != nil {
				return err
			}
			return done(ctx, tx, tenant, rec, step,
				Store{Name: "process_instances", Mode: ModeTombstoned, Count: instances,
					Note: "instances on the subject's streams: declared personal fields of their state and steps hold their tombstones; history notes, reasons and step errors cleared"},
				Store{Name: "dead_letter_errors", Mode: ModeTombstoned, Count: letters,
					Note: "the error text of the dead letters on the subject's streams, which may quote an opened field, cleared"})
		})
	case StepExports:
		return pgx.BeginFunc(ctx, e.cfg.Owner, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleOwner); err != nil {
				return err
			}
			var n int64
			if err := tx.QueryRow(ctx, `WITH jobs AS (SELECT id FROM tenant_exports WHERE tenant = $1),
chunks AS (DELETE FROM tenant_export_chunks WHERE job IN (SELECT id FROM jobs)),
gone AS (DELETE FROM tenant_exports WHERE id IN (SELECT id FROM jobs) RETURNING 1)
SELECT count(*) FROM gone`, tenant).Scan(&n); err != nil {
				return err
			}
			if err := asEraser(ctx, tx, tenant); err != nil {
				return err
			}
			return done(ctx, tx, tenant, rec, step, Store{Name: "exports", Mode: ModeDeleted, Count: n,
				Note: "the tenant's stored export archives (they hold personal fields opened)"})
		})
	case StepReadModels:
		n, err := e.cfg.Rebuild(ctx, tenant)
		if err != nil {
			return err
		}
		return e.eraserTx(ctx, tenant, func(tx pgx.Tx) error {
			return done(ctx, tx, tenant, rec, step, Store{Name: "read_models", Mode: ModeTombstoned, Count: int64(n),
				Note: "projections whose rows of the tenant were rebuilt from the log: the subject's fields hold their tombstones"})
		})
	case StepNotice:
		if e.cfg.Announce == nil || rec.keyID == "" {
			note := "the relay is off: no broker holds the tenant's events"
			if rec.keyID == "" {
				note = "no key was destroyed"
			}
			return e.eraserTx(ctx, tenant, func(tx pgx.Tx) error {
				return done(ctx, tx, tenant, rec, step, Store{Name: "broker_notice", Mode: ModeNotified, Count: 0, Note: note})
			})
		}
		return pgx.BeginFunc(ctx, e.cfg.Owner, func(tx pgx.Tx) error {
			where, err := e.cfg.Announce(ctx, tx, Notice{ErasureID: rec.id, Tenant: tenant, KeyID: rec.keyID,
				Pseudonym: event.PseudonymOf(rec.keyID), At: rec.started.UTC()})
			if err != nil {
				return err
			}
			if err := asEraser(ctx, tx, tenant); err != nil {
				return err
			}
			return done(ctx, tx, tenant, rec, step, Store{Name: "broker_notice", Mode: ModeNotified, Count: 1,
				Note: "the erasure's notice, naming the destroyed key, published on " + where + ": consumers that stored fields it sealed, opened, forget them"})
		})
	case StepReceipt:
		return e.eraserTx(ctx, tenant, func(tx pgx.Tx) error {
			r := Receipt{ErasureID: rec.id, Tenant: tenant, SubjectHash: hash, KeyID: rec.keyID, Reason: rec.reason, RequestedBy: rec.actor,
				StartedAt: rec.started.UTC()}
			if rec.keyID != "" {
				r.Pseudonym = event.PseudonymOf(rec.keyID)
			}
			for _, s := range rec.stores {
				r.Stores = append(r.Stores, s)
			}
			slices.SortFunc(r.Stores, func(a, b Store) int {
				switch {
				case a.Name < b.Name:
					return -1
				case a.Name > b.Name:
					return 1
				}
				return 0
			})
			body, err := json.Marshal(r)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(body)
			r.ContentHash = hex.EncodeToString(sum[:])
			raw, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := done(ctx, tx, tenant, rec, step); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE subject_erasures SET receipt = $3, finished_at = now() WHERE tenant_id = $1 AND erasure_id = $2`,
				tenant, rec.id, raw); err != nil {
				return err
			}
			rec.receipt = &r
			return nil
		})
	}
	return fmt.Errorf("unknown step %q", step)
}

// deleteIdempotency deletes the tenant's idempotency records of the
// commands whose events keyID sealed: a record's key is the client's
// choice (it may name the person), and the command ID derived from it is
// on every event the command appended.
func deleteIdempotency(ctx context.Context, tx pgx.Tx, tenant, keyID string) (int64, error) {
	if keyID == "" {
		return 0, nil
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT metadata->>'command_id' FROM events WHERE tenant_id = $1 AND strpos(data::text, $2) > 0`, tenant, keyID)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return 0, err
	}
	commandIDs := map[string]bool{}
	for _, id := range ids {
		if id != nil {
			commandIDs[*id] = true
		}
	}
	rows, err = tx.Query(ctx, `SELECT key FROM idempotency_keys WHERE tenant_id = $1`, tenant)
	if err != nil {
		return 0, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	var doomed []string
	for _, k := range keys {
		if commandIDs[commands.CommandID(tenant, k)] {
			doomed = append(doomed, k)
		}
	}
	if len(doomed) == 0 {
		return 0, nil
	}
	tag, err := tx.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = ANY($2)`, tenant, doomed)
	return tag.RowsAffected(), err
}

// eraserTx runs fn in a transaction of the owner connection as
// strata_eraser under the tenant.
func (e *Eraser) eraserTx(ctx context.Context, tenant string, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, e.cfg.Owner, func(tx pgx.Tx) error {
		if err := asEraser(ctx, tx, tenant); err != nil {
			return err
		}
		return fn(tx)
	})
}

func asEraser(ctx context.Context, tx pgx.Tx, tenant string) error {
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleEraser); err != nil {
		return fmt.Errorf("become %s (the owner connection must be a member; run `strata migrate up`): %w", db.RoleEraser, err)
	}
	return db.SetTenant(ctx, tx, tenant)
}
