package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// A parked instance is a parked stream in the dead-letter store: the
// letters under the process's name in the instance's stream are the inputs
// it did not decide, in the order they arrived (letter IDs): log events,
// and synthetic letters (type strata.process.input) for outcomes, timeouts
// and steps that failed past their attempts. An operator retries or
// discards them with `strata replay dlq` or the admin API, which route a
// letter whose projection is a process here, under the process's
// projections.Exclusive (the runner yields meanwhile).

// RetryOutcome is what RetryInstance did.
type RetryOutcome struct {
	Tenant string `json:"tenant"`
	Stream string `json:"stream"`
	// Instances are the instances that were parked in the stream.
	Instances []string `json:"instances"`
	// Decided lists the letters decided again (or, for a failed step,
	// whose step was re-queued), in order.
	Decided []int64 `json:"decided"`
	// Requeued lists the steps put back into the outbox with their
	// attempts reset ("instance/step"), executed by the runner with their
	// original keys.
	Requeued []string `json:"requeued"`
	// Unparked: every letter was decided; the instances go on.
	Unparked bool `json:"unparked"`
	// FailedLetter and Error: the letter whose decision failed again; the
	// retry changed nothing but that letter's attempts and error.
	FailedLetter int64  `json:"failed_letter,omitempty"`
	Error        string `json:"error,omitempty"`
}

// DiscardOutcome is what DiscardInstance did.
type DiscardOutcome struct {
	Tenant    string   `json:"tenant"`
	Stream    string   `json:"stream"`
	Instances []string `json:"instances"`
	// Discarded lists the letters marked discarded, never decided.
	Discarded []int64 `json:"discarded"`
	// Steps lists the parked steps marked discarded, never executed again
	// ("instance/step").
	Steps  []string `json:"steps"`
	Reason string   `json:"reason"`
}

// parkedSet is what a retry or a discard works on, read in its
// transaction.
type parkedSet struct {
	gen       string
	letters   []projections.DeadLetter
	instances map[string]*instanceRow
	order     []string
}

func (w *writer) loadParked(ctx context.Context, tx pgx.Tx, tenant, stream string) (*parkedSet, error) {
	ps := &parkedSet{instances: map[string]*instanceRow{}}
	if _, err := tx.Exec(ctx, db.SetTenantSQL, tenant); err != nil {
		return nil, err
	}
	// The checkpoint row is locked like ParkEvent locks it: its counters
	// change here.
	if err := tx.QueryRow(ctx, `SELECT generation::text FROM projection_checkpoints WHERE projection = $1 FOR UPDATE`, w.name).Scan(&ps.gen); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: %s of tenant %s for %s", projections.ErrNotParked, stream, tenant, w.name)
		}
		return nil, err
	}
	var parked bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4)`,
		tenant, w.name, ps.gen, stream).Scan(&parked); err != nil {
		return nil, err
	}
	if !parked {
		return nil, fmt.Errorf("%w: %s of tenant %s for %s", projections.ErrNotParked, stream, tenant, w.name)
	}
	letters, err := projections.ReadDeadLetters(ctx, tx, []string{tenant}, projections.LetterFilter{
		Projections: []string{w.name}, Stream: stream, Statuses: []projections.LetterStatus{projections.LetterParked}, Limit: 100_000})
	if err != nil {
		return nil, err
	}
	ps.letters = letters
	rows, err := tx.Query(ctx, `SELECT instance FROM process_instances WHERE tenant_id = $1 AND process = $2 AND stream_id = $3 AND parked ORDER BY instance`,
		tenant, w.name, stream)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if _, err := ps.instance(ctx, tx, w.name, tenant, id); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// instance returns the locked row of one instance, locking it first.
func (ps *parkedSet) instance(ctx context.Context, tx pgx.Tx, process, tenant, id string) (*instanceRow, error) {
	if inst := ps.instances[id]; inst != nil {
		return inst, nil
	}
	inst, err := lockInstance(ctx, tx, process, tenant, id)
	if err != nil {
		return nil, err
	}
	ps.instances[id] = &inst
	ps.order = append(ps.order, id)
	return &inst, nil
}

// settle updates what a retry or a discard resolved: the letters, the
// parked stream, the checkpoint's counters, the instances' flags and
// their history.
func (w *writer) settle(ctx context.Context, tx pgx.Tx, ps *parkedSet, tenant, stream, status, actor, reason, kind string) error {
	ids := make([]int64, len(ps.letters))
	for i, l := range ps.letters {
		ids[i] = l.ID
	}
	var r *string
	if reason != "" {
		r = &reason
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE dead_letters SET status = $3, resolved_at = now(), resolved_by = $4, reason = $5
WHERE tenant_id = $1 AND id = ANY($2::bigint[]) AND status = 'parked'`, tenant, ids, status, actor, r)
	b.Queue(`DELETE FROM parked_streams WHERE tenant_id = $1 AND projection = $2 AND generation = $3::uuid AND stream_id = $4`,
		tenant, w.name, ps.gen, stream)
	b.Queue(`UPDATE projection_checkpoints SET parked_streams = greatest(parked_streams - 1, 0), parked_letters = greatest(parked_letters - $2, 0), updated_at = now()
WHERE projection = $1`, w.name, int64(len(ids)))
	now := w.now()
	for _, id := range ps.order {
		inst := ps.instances[id]
		b.Queue(`UPDATE process_instances SET parked = false, updated_at = $4 WHERE tenant_id = $1 AND process = $2 AND instance = $3`,
			tenant, w.name, id, now)
		note := kind + " by " + actor
		if reason != "" {
			note += ": " + reason
		}
		queueHistory(b, inst, kind, map[string]any{"letters": ids, "actor": actor}, statusOr(inst.status), note, now)
	}
	return tx.SendBatch(ctx, b).Close()
}

func statusOr(s string) string {
	if s == "" {
		return statusNew
	}
	return s
}

// RetryInstance decides again, in order, the parked inputs of the
// instances parked in stream of tenant, re-queues their parked steps
// (attempts reset; the runner executes them with their original keys),
// marks the letters retried by actor and unparks the instances, all in
// one transaction on x (the process's projections.Exclusive, so that its
// runner is not working meanwhile). When a decision fails again nothing
// changes but that letter's attempts and error, and the outcome says so.
// reg decodes the parked log events. Errors: projections.ErrNotParked,
// and database errors.
func RetryInstance(ctx context.Context, x *projections.Exclusive, m Manager, reg *event.Registry, tenant, stream, actor string) (RetryOutcome, error) {
	out := RetryOutcome{Tenant: tenant, Stream: stream}
	rt, err := asRuntime(m)
	if err != nil {
		return out, err
	}
	if x == nil || x.Key() != rt.Name() || x.Conn() == nil {
		return out, fmt.Errorf("process %s: retry needs the process's exclusive lease", rt.Name())
	}
	if reg == nil || strings.TrimSpace(actor) == "" {
		return out, errors.New("retry: the registry and an actor are required")
	}
	w := &writer{m: rt, name: rt.Name(), now: time.Now}
	var failed *projections.DeadLetter
	var failure error
	err = pgx.BeginFunc(ctx, x.Conn(), func(tx pgx.Tx) error {
		ps, err := w.loadParked(ctx, tx, tenant, stream)
		if err != nil {
			return err
		}
		for _, id := range ps.order {
			ps.instances[id].parked = false
		}
		for _, id := range ps.order {
			out.Instances = append(out.Instances, id)
		}
		rows, err := tx.Query(ctx, `UPDATE process_steps SET status = 'pending', attempts = 0, next_attempt_at = $4, last_error = NULL
WHERE tenant_id = $1 AND process = $2 AND instance = ANY($3::text[]) AND status = 'parked' RETURNING instance || '/' || step`,
			tenant, w.name, ps.order, w.now())
		if err != nil {
			return err
		}
		if out.Requeued, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		for i := range ps.letters {
			l := &ps.letters[i]
			if err := w.retryLetter(ctx, tx, ps, rt, reg, tenant, l); err != nil {
				var poison *poisonError
				if errors.As(err, &poison) {
					failed, failure = l, poison
					return errRetryFailed
				}
				return err
			}
			out.Decided = append(out.Decided, l.ID)
		}
		if err := w.settle(ctx, tx, ps, tenant, stream, string(projections.LetterRetried), actor, "", histRetried); err != nil {
			return err
		}
		out.Unparked = true
		return nil
	})
	if errors.Is(err, errRetryFailed) {
		out = RetryOutcome{Tenant: tenant, Stream: stream, Instances: out.Instances, FailedLetter: failed.ID, Error: clip(failure.Error(), 2000)}
		err = pgx.BeginFunc(ctx, x.Conn(), func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, db.SetTenantSQL, tenant); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE dead_letters SET attempts = attempts + 1, error = $3, last_failed_at = now(), first_failed_at = coalesce(first_failed_at, now())
WHERE tenant_id = $1 AND id = $2`, tenant, failed.ID, out.Error)
			return err
		})
	}
	if err != nil {
		return out, fmt.Errorf("retry %s/%s for %s: %w", tenant, stream, rt.Name(), err)
	}
	return out, nil
}

var errRetryFailed = errors.New("a parked input failed again")

// retryLetter decides one parked input again. A failing decision is a
// *poisonError.
func (w *writer) retryLetter(ctx context.Context, tx pgx.Tx, ps *parkedSet, rt runtime, reg *event.Registry, tenant string, l *projections.DeadLetter) error {
	var inst *instanceRow
	var in Input
	if l.Event.Type == letterType {
		var li letterInput
		if err := json.Unmarshal(l.Event.Data, &li); err != nil {
			return &poisonError{err: fmt.Errorf("letter %d: %w", l.ID, err)}
		}
		var err error
		if inst, err = ps.instance(ctx, tx, w.name, tenant, li.Instance); err != nil {
			return err
		}
		if !inst.exists {
			return &poisonError{err: fmt.Errorf("letter %d: instance %s does not exist", l.ID, li.Instance)}
		}
		inst.parked = false
		switch li.Kind {
		case "step":
			// The step is back in the outbox (re-queued above): its
			// outcome comes as an input of its own.
			return nil
		case string(InputOutcome):
			in = Input{Kind: InputOutcome, Outcome: li.Outcome}
		case string(InputTimeout):
			in = Input{Kind: InputTimeout, Timeout: li.Timeout}
		default:
			return &poisonError{err: fmt.Errorf("letter %d: unknown parked input %q", l.ID, li.Kind)}
		}
		in.Instance, in.Tenant, in.At = li.Instance, domain.TenantID(tenant), li.At
	} else {
		payload, err := reg.DecodeRecord(l.Event)
		if err != nil {
			return &poisonError{err: fmt.Errorf("letter %d: %w", l.ID, err)}
		}
		ev := Event{Record: l.Event, Payload: payload}
		id, stream, ok, err := rt.correlate(ev)
		if err != nil {
			return &poisonError{err: fmt.Errorf("letter %d: correlate: %w", l.ID, err)}
		}
		if !ok {
			// Not for this process (after a fix, a letter parked because
			// its correlation failed may say so): nothing to decide.
			return nil
		}
		if inst, err = ps.instance(ctx, tx, w.name, tenant, id); err != nil {
			return err
		}
		if !inst.exists {
			inst.stream = stream
		}
		inst.parked = false
		in = Input{Kind: InputEvent, Instance: id, Tenant: domain.TenantID(tenant), At: l.Event.RecordedAt, Event: &ev}
	}
	if inst.done {
		return w.record(ctx, tx, inst, histIgnored, summarize(in), "the instance is done")
	}
	_, err := w.apply(ctx, tx, inst, in)
	return err
}

// DiscardInstance marks the parked inputs of the instances parked in
// stream of tenant discarded (actor and reason recorded; they are never
// decided), marks their parked steps discarded (never executed again) and
// unparks the instances, in one transaction on x. Errors:
// projections.ErrNotParked, and database errors.
func DiscardInstance(ctx context.Context, x *projections.Exclusive, m Manager, tenant, stream, actor, reason string) (DiscardOutcome, error) {
	out := DiscardOutcome{Tenant: tenant, Stream: stream, Reason: reason}
	rt, err := asRuntime(m)
	if err != nil {
		return out, err
	}
	if x == nil || x.Key() != rt.Name() || x.Conn() == nil {
		return out, fmt.Errorf("process %s: discard needs the process's exclusive lease", rt.Name())
	}
	if strings.TrimSpace(reason) == "" || strings.TrimSpace(actor) == "" {
		return out, errors.New("discard: a reason and an actor are required")
	}
	w := &writer{m: rt, name: rt.Name(), now: time.Now}
	err = pgx.BeginFunc(ctx, x.Conn(), func(tx pgx.Tx) error {
		ps, err := w.loadParked(ctx, tx, tenant, stream)
		if err != nil {
			return err
		}
		out.Instances = append(out.Instances, ps.order...)
		for _, l := range ps.letters {
			out.Discarded = append(out.Discarded, l.ID)
		}
		rows, err := tx.Query(ctx, `UPDATE process_steps SET status = 'discarded', next_attempt_at = NULL, finished_at = $4
WHERE tenant_id = $1 AND process = $2 AND instance = ANY($3::text[]) AND status = 'parked' RETURNING instance || '/' || step`,
			tenant, w.name, ps.order, w.now())
		if err != nil {
			return err
		}
		if out.Steps, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		return w.settle(ctx, tx, ps, tenant, stream, string(projections.LetterDiscarded), actor, reason, histDiscarded)
	})
	if err != nil {
		return out, fmt.Errorf("discard %s/%s for %s: %w", tenant, stream, rt.Name(), err)
	}
	return out, nil
}
