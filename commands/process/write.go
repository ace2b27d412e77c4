package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// runtime is what the engine needs of a Manager: New's *manager[S].
type runtime interface {
	Manager
	correlate(ev Event) (instance, stream string, ok bool, err error)
	decide(stored json.RawMessage, in Input) (decided, error)
}

func asRuntime(m Manager) (runtime, error) {
	if m == nil {
		return nil, errors.New("process: the manager is nil")
	}
	rt, ok := m.(runtime)
	if !ok {
		return nil, fmt.Errorf("process %s: the manager (%T) was not made by process.New", m.Name(), m)
	}
	return rt, nil
}

// History kinds (process_history.kind).
const (
	histEvent     = "event"
	histOutcome   = "outcome"
	histTimeout   = "timeout"
	histIgnored   = "ignored"
	histParked    = "parked"
	histRetried   = "retried"
	histDiscarded = "discarded"
)

// instanceRow is an instance as the writer holds it, locked, in one
// transaction.
type instanceRow struct {
	tenant, process, instance, stream string
	exists                            bool            // a row exists
	state                             json.RawMessage // nil: nothing decided yet
	status                            string
	done, parked                      bool
	inputs                            int64
	// erasedAs is the pseudonym of the data subject whose erasure redacted
	// the instance (process_instances.erased_as), "" when none did: what
	// the runtime writes of it from then on is redacted likewise (erased.go).
	erasedAs string
}

// lockInstance reads and locks one instance (FOR UPDATE), in tx with the
// tenant set. A missing instance comes back with exists false.
func lockInstance(ctx context.Context, tx pgx.Tx, process, tenant, instance string) (instanceRow, error) {
	row := instanceRow{tenant: tenant, process: process, instance: instance}
	var state []byte
	err := tx.QueryRow(ctx, `SELECT stream_id, state, status, done, parked, inputs, coalesce(erased_as, '') FROM process_instances
WHERE tenant_id = $1 AND process = $2 AND instance = $3 FOR UPDATE`, tenant, process, instance).
		Scan(&row.stream, &state, &row.status, &row.done, &row.parked, &row.inputs, &row.erasedAs)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return row, nil
	case err != nil:
		return row, fmt.Errorf("lock instance %s/%s of %s: %w", tenant, instance, process, err)
	}
	row.exists = true
	if state != nil {
		row.state = state
	}
	return row, nil
}

// writer decides inputs and writes their effects inside a caller's
// transaction (the runner's batch, an outcome's or a firing's transaction,
// an operator's retry). It holds no connection.
type writer struct {
	m     runtime
	name  string
	now   func() time.Time
	known func(kind StepKind, name string) bool // nil: every name is accepted
}

// inputSummary is what process_history.summary holds about an input.
type inputSummary struct {
	// Event inputs.
	Type     string `json:"type,omitempty"`
	ID       string `json:"id,omitempty"`
	Stream   string `json:"stream,omitempty"`
	Version  int64  `json:"version,omitempty"`
	Position string `json:"position,omitempty"`
	// Outcome inputs.
	Step   string   `json:"step,omitempty"`
	Kind   StepKind `json:"kind,omitempty"`
	Name   string   `json:"name,omitempty"`
	OK     *bool    `json:"ok,omitempty"`
	Reason string   `json:"reason,omitempty"`
	// Timeout inputs (Name is the deadline's).
	Due *time.Time `json:"due,omitempty"`
	// Effects of the decision.
	Commands  []string `json:"commands,omitempty"`
	Intents   []string `json:"intents,omitempty"`
	Deadlines []string `json:"deadlines,omitempty"`
	Cancelled []string `json:"cancelled,omitempty"`
	// Letter is the dead letter the input waits in (kind parked).
	Letter string `json:"letter,omitempty"`
}

func summarize(in Input) inputSummary {
	var s inputSummary
	switch in.Kind {
	case InputEvent:
		e := in.Event
		s.Type, s.ID, s.Stream, s.Version, s.Position = e.Type, e.ID, e.Stream, e.Version, e.Position.String()
	case InputOutcome:
		o := in.Outcome
		ok := o.OK
		s.Step, s.Kind, s.Name, s.OK, s.Reason = o.Step, o.Kind, o.Name, &ok, o.Reason
	case InputTimeout:
		due := in.Timeout.Due
		s.Name, s.Due = in.Timeout.Name, &due
	}
	return s
}

func historyKind(k InputKind) string {
	switch k {
	case InputOutcome:
		return histOutcome
	case InputTimeout:
		return histTimeout
	}
	return histEvent
}

// poisonError is a decision that failed (Decide's error, or a decision
// the runtime refuses): the input parks its instance.
type poisonError struct{ err error }

func (p *poisonError) Error() string { return p.err.Error() }
func (p *poisonError) Unwrap() error { return p.err }

// check refuses what the runtime cannot carry out: a step whose command or
// port the runner was not given (the rest, Decision.Validate checked).
func (w *writer) check(d decided) error {
	for _, s := range d.Steps {
		if w.known != nil && !w.known(s.Kind, s.Name) {
			return fmt.Errorf("%s decided a %s %q that the runner was not given", w.name, s.Kind, s.Name)
		}
	}
	return nil
}

// apply decides in for inst (which must be neither done nor parked) and
// writes the decision: the instance's state, the new steps (a step key
// already present is not inserted again), the deadlines set and
// cancelled, and the history entry. lastEvent is the event input, if
// any. A failing decision comes back as a *poisonError with nothing
// written; any other error is the database's. It reports how many steps
// were inserted.
func (w *writer) apply(ctx context.Context, tx pgx.Tx, inst *instanceRow, in Input) (int, error) {
	d, err := w.m.decide(inst.state, in)
	if err == nil {
		err = w.check(d)
	}
	if err == nil {
		err = w.redactDecision(inst, &d)
	}
	if err != nil {
		return 0, &poisonError{err: err}
	}
	now := w.now()
	var last []byte
	if in.Kind == InputEvent {
		if last, err = json.Marshal(in.Event.Record); err != nil {
			return 0, &poisonError{err: fmt.Errorf("encode event: %w", err)}
		}
	}
	sum := summarize(in)
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO process_instances AS i (tenant_id, process, instance, stream_id, state, status, done, inputs, last_event,
    created_at, updated_at, last_progress_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $9, $9, $9)
ON CONFLICT (tenant_id, process, instance) DO UPDATE SET state = excluded.state, status = excluded.status, done = excluded.done,
    inputs = i.inputs + 1, last_event = coalesce(excluded.last_event, i.last_event),
    updated_at = excluded.updated_at, last_progress_at = excluded.last_progress_at`,
		inst.tenant, w.name, inst.instance, inst.stream, []byte(d.State), d.Status, d.Done, last, now)
	inserted := 0
	for _, s := range d.Steps {
		key := StepKey(w.name, inst.instance, s.Key)
		if s.Kind == StepCommand {
			sum.Commands = append(sum.Commands, s.Key)
		} else {
			sum.Intents = append(sum.Intents, s.Key)
		}
		b.Queue(`INSERT INTO process_steps (tenant_id, process, instance, step, kind, name, payload, idem_key, next_attempt_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
ON CONFLICT (tenant_id, process, instance, step) DO NOTHING`,
			inst.tenant, w.name, inst.instance, s.Key, string(s.Kind), s.Name, []byte(s.Payload), key, now).
			Exec(func(ct pgconn.CommandTag) error {
				inserted += int(ct.RowsAffected())
				return nil
			})
	}
	for _, dl := range d.Deadlines {
		sum.Deadlines = append(sum.Deadlines, dl.Name)
		b.Queue(`INSERT INTO process_deadlines (tenant_id, process, instance, name, due_at, set_at) VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant_id, process, instance, name) DO UPDATE SET due_at = excluded.due_at, status = 'pending', set_at = excluded.set_at, fired_at = NULL`,
			inst.tenant, w.name, inst.instance, dl.Name, dl.At, now)
	}
	if len(d.Cancel) > 0 || d.Done {
		// Done cancels every pending deadline: a terminal instance waits
		// for nothing.
		sum.Cancelled = d.Cancel
		b.Queue(`UPDATE process_deadlines SET status = 'cancelled'
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND status = 'pending' AND ($5 OR name = ANY($4::text[]))`,
			inst.tenant, w.name, inst.instance, d.Cancel, d.Done)
	}
	queueHistory(b, inst, historyKind(in.Kind), sum, d.Status, d.Note, now)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("write decision of %s/%s of %s: %w", inst.tenant, inst.instance, w.name, err)
	}
	inst.exists, inst.state, inst.status, inst.done = true, d.State, d.Status, d.Done
	inst.inputs++
	return inserted, nil
}

func queueHistory(b *pgx.Batch, inst *instanceRow, kind string, summary any, status, note string, at time.Time) {
	if sum, ok := summary.(inputSummary); ok && inst.erasedAs != "" {
		sum.Reason = ""
		summary = sum
	}
	note = inst.freeText(note)
	b.Queue(`INSERT INTO process_history (tenant_id, process, instance, kind, summary, status_after, note, at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		inst.tenant, inst.process, inst.instance, kind, summary, status, clip(note, 500), at)
}

// record appends one history entry that decides nothing (ignored, parked,
// retried, discarded).
func (w *writer) record(ctx context.Context, tx pgx.Tx, inst *instanceRow, kind string, summary any, note string) error {
	b := &pgx.Batch{}
	status := inst.status
	if status == "" {
		status = statusNew
	}
	queueHistory(b, inst, kind, summary, status, note, w.now())
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record %s input of %s/%s of %s: %w", kind, inst.tenant, inst.instance, w.name, err)
	}
	return nil
}

// statusNew is the status of an instance whose first input was parked
// before any decision.
const statusNew = "new"

// The dead letters of inputs that are not log events: an outcome or a
// timeout whose decision failed or that arrived while its instance was
// parked, and a step that failed past its attempts. They carry this type
// (never in any registry), a fresh ID, the instance's stream and position
// zero, and the input as data, so that RetryInstance can decide it again.
const (
	letterType          = "strata.process.input"
	letterSchemaVersion = 1
)

// letterInput is the data of a synthetic dead letter.
type letterInput struct {
	Process  string    `json:"process"`
	Instance string    `json:"instance"`
	Kind     string    `json:"kind"` // "outcome", "timeout" or "step" (a step failed past its attempts)
	Step     string    `json:"step,omitempty"`
	Outcome  *Outcome  `json:"outcome,omitempty"`
	Timeout  *Timeout  `json:"timeout,omitempty"`
	At       time.Time `json:"at"`
}

func (w *writer) letterRecord(inst *instanceRow, li letterInput) (event.Record, error) {
	if li.Outcome != nil && inst.erasedAs != "" {
		o := *li.Outcome
		o.Reason = inst.freeText(o.Reason)
		var err error
		if o.Result, err = w.redact(inst, o.Result); err != nil {
			return event.Record{}, fmt.Errorf("redact parked outcome: %w", err)
		}
		li.Outcome = &o
	}
	data, err := json.Marshal(li)
	if err != nil {
		return event.Record{}, fmt.Errorf("encode parked input: %w", err)
	}
	return event.Record{
		ID:            uuid.NewString(),
		Tenant:        inst.tenant,
		Stream:        inst.stream,
		Version:       inst.inputs + 1,
		Type:          letterType,
		SchemaVersion: letterSchemaVersion,
		Data:          data,
		RecordedAt:    w.now(),
	}, nil
}

// park puts rec (a log event, or a synthetic letter of an input) into the
// dead-letter store under the process's name, in the instance's stream,
// parks the instance and records that in its history. When the instance
// is parked already rec waits behind its head (attempts 0); otherwise rec
// becomes the head with cause. A missing instance is created (status new,
// no state).
func (w *writer) park(ctx context.Context, tx pgx.Tx, inst *instanceRow, rec event.Record, cause string, attempts int, summary inputSummary) error {
	now := w.now()
	if !inst.exists {
		if _, err := tx.Exec(ctx, `INSERT INTO process_instances (tenant_id, process, instance, stream_id, status, parked, created_at, updated_at, last_progress_at)
VALUES ($1, $2, $3, $4, $5, true, $6, $6, $6)`, inst.tenant, w.name, inst.instance, inst.stream, statusNew, now); err != nil {
			return fmt.Errorf("park instance %s/%s of %s: %w", inst.tenant, inst.instance, w.name, err)
		}
		inst.exists, inst.status = true, statusNew
	} else if !inst.parked {
		if _, err := tx.Exec(ctx, `UPDATE process_instances SET parked = true, updated_at = $4 WHERE tenant_id = $1 AND process = $2 AND instance = $3`,
			inst.tenant, w.name, inst.instance, now); err != nil {
			return fmt.Errorf("park instance %s/%s of %s: %w", inst.tenant, inst.instance, w.name, err)
		}
	}
	letter := rec
	letter.Stream = inst.stream
	cause = inst.freeText(cause)
	p, err := projections.ParkEvent(ctx, tx, w.name, letter, clip(cause, 2000), attempts)
	if err != nil {
		return err
	}
	inst.parked = true
	summary.Letter = letter.ID
	note := "parked behind the instance's failed input (version " + fmt.Sprint(p.HeadVersion) + " of its stream)"
	if p.Head {
		note = "parked the instance: " + cause
	}
	return w.record(ctx, tx, inst, histParked, summary, note)
}

// hold parks inst without a letter of its own: an event of its stream
// waits in the dead-letter store (summary names it), and so does the
// instance until that stream is retried or discarded.
func (w *writer) hold(ctx context.Context, tx pgx.Tx, inst *instanceRow, summary inputSummary, note string) error {
	if _, err := tx.Exec(ctx, `UPDATE process_instances SET parked = true, updated_at = $4 WHERE tenant_id = $1 AND process = $2 AND instance = $3`,
		inst.tenant, w.name, inst.instance, w.now()); err != nil {
		return fmt.Errorf("park instance %s/%s of %s: %w", inst.tenant, inst.instance, w.name, err)
	}
	inst.parked = true
	return w.record(ctx, tx, inst, histParked, summary, note)
}

// clip bounds text kept for operators.
func clip(s string, n int) string {
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
	}
	return s
}

func validInstance(id string) error { return domain.ValidateEntityID("process instance", id) }

func tenantID(s string) domain.TenantID { return domain.TenantID(s) }

// errText is a failure as the outbox and the dead-letter store keep it:
// clipped, and without the database's own text (a command's store error
// may carry it; operators see the SQLSTATE).
func errText(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return "database error (SQLSTATE " + pgErr.Code + ")"
	}
	return clip(err.Error(), 2000)
}
