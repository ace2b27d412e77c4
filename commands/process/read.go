package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// The operator's reads. Row-level security needs the tenant set per
// query, so each takes the tenants to read (the admin API's tenant, or for
// the CLI every tenant of the log, projections.Tenants) and reads each
// under its own setting, pipelined like projections.ReadDeadLetters. q is
// a pool, connection or transaction of db.RoleApp or db.RoleProjector.

// Instance is one process instance as operators see it.
type Instance struct {
	Tenant         string    `json:"tenant"`
	Process        string    `json:"process"`
	Instance       string    `json:"instance"`
	Stream         string    `json:"stream"`
	Status         string    `json:"status"`
	Done           bool      `json:"done"`
	Parked         bool      `json:"parked"`
	Inputs         int64     `json:"inputs"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	LastProgressAt time.Time `json:"last_progress_at"`
	// PendingSteps and PendingDeadlines count what the instance waits
	// for; NextDeadline is its earliest pending deadline.
	PendingSteps     int64      `json:"pending_steps"`
	PendingDeadlines int64      `json:"pending_deadlines"`
	NextDeadline     *time.Time `json:"next_deadline,omitempty"`
}

// InstanceFilter selects instances of one tenant.
type InstanceFilter struct {
	// Process restricts to one process (all when empty).
	Process string
	// Status restricts to one status label.
	Status string
	// Parked, when set, restricts to parked (true) or unparked instances.
	Parked *bool
	// StuckFor, when positive, selects instances not done whose last
	// decision is older than StuckFor before Now.
	StuckFor time.Duration
	// Now is the reference time of StuckFor (zero: time.Now()).
	Now time.Time
	// After and Limit page through a tenant's instances in (process,
	// instance) order: After is the last "process/instance" seen (Limit 0:
	// 100, at most 1000).
	After string
	Limit int
}

const instanceSelect = `SELECT i.tenant_id, i.process, i.instance, i.stream_id, i.status, i.done, i.parked, i.inputs,
       i.created_at, i.updated_at, i.last_progress_at,
       (SELECT count(*) FROM process_steps s WHERE s.tenant_id = i.tenant_id AND s.process = i.process AND s.instance = i.instance AND s.status = 'pending'),
       (SELECT count(*) FROM process_deadlines d WHERE d.tenant_id = i.tenant_id AND d.process = i.process AND d.instance = i.instance AND d.status = 'pending'),
       (SELECT min(due_at) FROM process_deadlines d WHERE d.tenant_id = i.tenant_id AND d.process = i.process AND d.instance = i.instance AND d.status = 'pending')`

func scanInstance(row pgx.Row, in *Instance) error {
	return row.Scan(&in.Tenant, &in.Process, &in.Instance, &in.Stream, &in.Status, &in.Done, &in.Parked, &in.Inputs,
		&in.CreatedAt, &in.UpdatedAt, &in.LastProgressAt, &in.PendingSteps, &in.PendingDeadlines, &in.NextDeadline)
}

// ListInstances returns the instances of each of tenants that match f, in
// (process, instance) order per tenant, at most f.Limit per tenant.
func ListInstances(ctx context.Context, q projections.BatchSender, tenants []string, f InstanceFilter) ([]Instance, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 1000)
	if f.Now.IsZero() {
		f.Now = time.Now()
	}
	var stuckBefore *time.Time
	if f.StuckFor > 0 {
		t := f.Now.Add(-f.StuckFor)
		stuckBefore = &t
	}
	sql := instanceSelect + ` FROM process_instances i
WHERE i.tenant_id = $1 AND ($2 = '' OR i.process = $2) AND ($3 = '' OR i.status = $3) AND ($4::boolean IS NULL OR i.parked = $4)
  AND ($5::timestamptz IS NULL OR (NOT i.done AND i.last_progress_at < $5)) AND ($6 = '' OR i.process || '/' || i.instance > $6)
ORDER BY i.process, i.instance LIMIT $7`
	var out []Instance
	for lo := 0; lo < len(tenants); lo += scanChunk {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+scanChunk, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(sql, t, f.Process, f.Status, f.Parked, stuckBefore, f.After, f.Limit).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var in Instance
					if err := scanInstance(rows, &in); err != nil {
						return err
					}
					out = append(out, in)
				}
				return rows.Err()
			})
		}
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("list process instances: %w", err)
		}
	}
	return out, nil
}

// HistoryEntry is one line of an instance's history.
type HistoryEntry struct {
	ID int64 `json:"id"`
	// Kind is event, outcome or timeout (an input decided), ignored (the
	// instance was done), parked (the input waits in the dead-letter
	// store), retried or discarded (an operator's action).
	Kind        string          `json:"kind"`
	Summary     json.RawMessage `json:"summary"`
	StatusAfter string          `json:"status_after"`
	Note        string          `json:"note,omitempty"`
	At          time.Time       `json:"at"`
}

// StepInfo is one step of an instance's outbox.
type StepInfo struct {
	Step          string          `json:"step"`
	Kind          StepKind        `json:"kind"`
	Name          string          `json:"name"`
	Payload       json.RawMessage `json:"payload"`
	Key           string          `json:"idempotency_key"`
	Status        string          `json:"status"`
	Attempts      int             `json:"attempts"`
	NextAttemptAt *time.Time      `json:"next_attempt_at,omitempty"`
	// LastError is the last failure, for the deployment's operators (the
	// engine keeps database text out of it).
	LastError  string          `json:"last_error,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

// DeadlineInfo is one deadline of an instance.
type DeadlineInfo struct {
	Name    string     `json:"name"`
	DueAt   time.Time  `json:"due_at"`
	Status  string     `json:"status"`
	SetAt   time.Time  `json:"set_at"`
	FiredAt *time.Time `json:"fired_at,omitempty"`
}

// InstanceDetail is one instance with its state, history, outbox and
// deadlines. History, Steps and Deadlines are never nil: an instance with
// none answers empty arrays, as the OpenAPI document says.
type InstanceDetail struct {
	Instance
	State     json.RawMessage `json:"state"`
	LastEvent *EventView      `json:"last_event,omitempty"`
	History   []HistoryEntry  `json:"history"`
	Steps     []StepInfo      `json:"steps"`
	Deadlines []DeadlineInfo  `json:"deadlines"`
}

// EventView is a log event as the HTTP API renders one, with the field
// names the dead-letter routes give an event (event_id, schema_version,
// position as a consistency token, recorded_at).
type EventView struct {
	EventID       string          `json:"event_id"`
	Tenant        string          `json:"tenant"`
	Stream        string          `json:"stream"`
	Version       int64           `json:"version"`
	Position      string          `json:"position"`
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schema_version"`
	Data          json.RawMessage `json:"data"`
	Metadata      event.Metadata  `json:"metadata"`
	RecordedAt    time.Time       `json:"recorded_at"`
}

// lastEventView renders process_instances.last_event, which holds an
// event.Record as encoding/json writes it (Go's field names: the column's
// format since it was added, kept so that every stored row reads alike).
func lastEventView(stored []byte) (*EventView, error) {
	if stored == nil {
		return nil, nil
	}
	var rec event.Record
	if err := json.Unmarshal(stored, &rec); err != nil {
		return nil, fmt.Errorf("decode the instance's last event: %w", err)
	}
	data := rec.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return &EventView{EventID: rec.ID, Tenant: rec.Tenant, Stream: rec.Stream, Version: rec.Version, Position: rec.Position.Token(),
		Type: rec.Type, SchemaVersion: rec.SchemaVersion, Data: data, Metadata: rec.Metadata, RecordedAt: rec.RecordedAt.UTC()}, nil
}

// ErrInstanceNotFound: no such instance in the tenant (also for another
// tenant's).
var ErrInstanceNotFound = errors.New("process instance not found")

// ReadInstance returns one instance of a tenant, its whole history in
// order, its steps and its deadlines. Errors: ErrInstanceNotFound.
func ReadInstance(ctx context.Context, q projections.BatchSender, tenant, process, instance string) (InstanceDetail, error) {
	d := InstanceDetail{History: []HistoryEntry{}, Steps: []StepInfo{}, Deadlines: []DeadlineInfo{}}
	found := false
	b := &pgx.Batch{}
	// One snapshot for the row, its history, steps and deadlines: read
	// with a snapshot each, a history could come with an older row.
	b.Queue(`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(instanceSelect+`, i.state, i.last_event FROM process_instances i WHERE i.tenant_id = $1 AND i.process = $2 AND i.instance = $3`,
		tenant, process, instance).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var state, last []byte
			err := rows.Scan(&d.Tenant, &d.Process, &d.Instance.Instance, &d.Stream, &d.Status, &d.Done, &d.Parked, &d.Inputs,
				&d.CreatedAt, &d.UpdatedAt, &d.LastProgressAt, &d.PendingSteps, &d.PendingDeadlines, &d.NextDeadline, &state, &last)
			if err != nil {
				return err
			}
			d.State, found = state, true
			d.LastEvent, err = lastEventView(last)
			if err != nil {
				return err
			}
		}
		return rows.Err()
	})
	b.Queue(`SELECT id, kind, summary, status_after, note, at FROM process_history WHERE tenant_id = $1 AND process = $2 AND instance = $3 ORDER BY id`,
		tenant, process, instance).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var h HistoryEntry
			var sum []byte
			if err := rows.Scan(&h.ID, &h.Kind, &sum, &h.StatusAfter, &h.Note, &h.At); err != nil {
				return err
			}
			h.Summary = sum
			d.History = append(d.History, h)
		}
		return rows.Err()
	})
	b.Queue(`SELECT step, kind, name, payload, idem_key, status, attempts, next_attempt_at, coalesce(last_error, ''), result, created_at, finished_at
FROM process_steps WHERE tenant_id = $1 AND process = $2 AND instance = $3 ORDER BY created_at, step`,
		tenant, process, instance).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var s StepInfo
			var kind string
			var payload, result []byte
			if err := rows.Scan(&s.Step, &kind, &s.Name, &payload, &s.Key, &s.Status, &s.Attempts, &s.NextAttemptAt, &s.LastError, &result, &s.CreatedAt, &s.FinishedAt); err != nil {
				return err
			}
			s.Kind, s.Payload = StepKind(kind), payload
			if result != nil {
				s.Result = result
			}
			d.Steps = append(d.Steps, s)
		}
		return rows.Err()
	})
	b.Queue(`SELECT name, due_at, status, set_at, fired_at FROM process_deadlines WHERE tenant_id = $1 AND process = $2 AND instance = $3 ORDER BY due_at, name`,
		tenant, process, instance).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var dl DeadlineInfo
			if err := rows.Scan(&dl.Name, &dl.DueAt, &dl.Status, &dl.SetAt, &dl.FiredAt); err != nil {
				return err
			}
			d.Deadlines = append(d.Deadlines, dl)
		}
		return rows.Err()
	})
	b.Queue(`COMMIT`)
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return d, fmt.Errorf("read process instance %s/%s: %w", process, instance, err)
	}
	if !found {
		return InstanceDetail{}, fmt.Errorf("%w: %s/%s", ErrInstanceNotFound, process, instance)
	}
	return d, nil
}

// CountByStatus counts the instances of tenants by process and status
// label (summed over the tenants): the metric of instances by state.
func CountByStatus(ctx context.Context, q projections.BatchSender, tenants []string) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	for lo := 0; lo < len(tenants); lo += scanChunk {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+scanChunk, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(`SELECT process, status, count(*) FROM process_instances WHERE tenant_id = $1 GROUP BY process, status`, t).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var p, s string
					var n int64
					if err := rows.Scan(&p, &s, &n); err != nil {
						return err
					}
					if out[p] == nil {
						out[p] = map[string]int64{}
					}
					out[p][s] += n
				}
				return rows.Err()
			})
		}
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("count process instances: %w", err)
		}
	}
	return out, nil
}

// Overdue is what is late of one process: its pending deadlines already
// due (not fired yet) and the oldest due time among them.
type Overdue struct {
	Deadlines int64      `json:"deadlines"`
	OldestDue *time.Time `json:"oldest_due,omitempty"`
	// Parked counts the parked instances.
	Parked int64 `json:"parked"`
}

// OverdueByProcess returns, per process, the deadlines of tenants due
// before now and not fired yet (a runner that is down, or behind), and the
// parked instances: what an alert looks at.
func OverdueByProcess(ctx context.Context, q projections.BatchSender, tenants []string, now time.Time) (map[string]Overdue, error) {
	out := map[string]Overdue{}
	for lo := 0; lo < len(tenants); lo += scanChunk {
		b := &pgx.Batch{}
		for _, t := range tenants[lo:min(lo+scanChunk, len(tenants))] {
			b.Queue(db.SetTenantSQL, t)
			b.Queue(`SELECT process, count(*), min(due_at), 0::bigint FROM process_deadlines WHERE tenant_id = $1 AND status = 'pending' AND due_at <= $2 GROUP BY process
UNION ALL
SELECT process, 0, NULL, count(*) FROM process_instances WHERE tenant_id = $1 AND parked GROUP BY process`, t, now).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var p string
					var n, parked int64
					var oldest *time.Time
					if err := rows.Scan(&p, &n, &oldest, &parked); err != nil {
						return err
					}
					o := out[p]
					o.Deadlines += n
					o.Parked += parked
					if oldest != nil && (o.OldestDue == nil || oldest.Before(*o.OldestDue)) {
						o.OldestDue = oldest
					}
					out[p] = o
				}
				return rows.Err()
			})
		}
		if err := q.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("read overdue deadlines: %w", err)
		}
	}
	return out, nil
}
