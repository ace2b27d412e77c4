package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/failpoint"
)

// errUnknownStep: a step names a command or port the runner was not given
// (the Spec changed under a pending step). It parks the instance at once.
var errUnknownStep = errors.New("no command or port of that name")

// dispatch executes one claimed step in a goroutine of its own and records
// its outcome. Executions run under dctx, which ends when the runner gives
// up its lease: an execution cut short then counts no attempt and leaves
// the step pending, to be executed again (with the same key) by the next
// leader.
func (r *Runner) dispatch(dctx context.Context, s dueStep) {
	r.workers.Add(1)
	go func() {
		defer r.workers.Done()
		defer r.wakeUp()
		defer r.release(s.id)
		start := time.Now()
		res, execErr := r.execute(dctx, s)
		dur := time.Since(start)
		if execErr != nil && dctx.Err() != nil {
			return
		}
		failpoint.Hit(FailpointAfterExecute)
		if h := r.cfg.hooks; h != nil && h.afterExecute != nil {
			if err := h.afterExecute(s.id.tenant, s.id.instance, s.id.step); err != nil {
				return
			}
		}
		// The outcome is recorded even when the runner is stopping: it
		// saves a re-execution.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(dctx), 10*time.Second)
		defer cancel()
		outcome, attempt, err := r.recordOutcome(rctx, s, res, execErr)
		if err != nil {
			if !errors.Is(err, errYield) {
				r.logger.Warn("cannot record a step's outcome; it stays pending and is executed again with its key",
					"tenant", s.id.tenant, "instance", s.id.instance, "step", s.id.step, "error", err.Error())
			}
			return
		}
		if outcome == "" {
			return // recorded already (by an earlier leader)
		}
		if outcome == StepParked {
			r.logger.Warn("a step failed past its attempts; the instance is parked",
				"tenant", s.id.tenant, "instance", s.id.instance, "step", s.id.step, "attempts", attempt, "error", errString(execErr))
		}
		if r.cfg.OnStep != nil {
			r.cfg.OnStep(StepReport{Process: r.name, Tenant: s.id.tenant, Instance: s.id.instance, Step: s.id.step,
				Kind: s.kind, Name: s.name, Outcome: outcome, Attempt: attempt, Duration: dur, Err: execErr})
		}
	}()
}

// execute runs the step's command or intent with its idempotency key,
// within StepTimeout.
func (r *Runner) execute(ctx context.Context, s dueStep) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StepTimeout)
	defer cancel()
	tenant := domain.TenantID(s.id.tenant)
	switch s.kind {
	case StepCommand:
		if f := r.spec.Commands[s.name]; f != nil {
			return f(ctx, tenant, s.payload, s.key)
		}
	case StepIntent:
		if p := r.spec.Ports[s.name]; p != nil {
			return p.Execute(ctx, tenant, s.key, s.payload)
		}
	}
	return nil, fmt.Errorf("%s %q: %w", s.kind, s.name, errUnknownStep)
}

// recordOutcome records one execution of s in one transaction: the step
// marked done or rejected and the Outcome decided for its instance (state,
// new steps, deadlines, history); or, for a transient failure, the attempt
// counted and the next one scheduled with backoff; or, past the attempts,
// the step and its instance parked. A step no longer pending was recorded
// already: it returns outcome "".
func (r *Runner) recordOutcome(ctx context.Context, s dueStep, res json.RawMessage, execErr error) (StepOutcome, int, error) {
	var outcome StepOutcome
	attempt := 0
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := probePause(ctx, tx, r.name); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, db.SetTenantSQL, s.id.tenant); err != nil {
			return err
		}
		inst, err := lockInstance(ctx, tx, r.name, s.id.tenant, s.id.instance)
		if err != nil {
			return err
		}
		var status string
		err = tx.QueryRow(ctx, `SELECT status, attempts FROM process_steps WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND step = $4 FOR UPDATE`,
			s.id.tenant, r.name, s.id.instance, s.id.step).Scan(&status, &attempt)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && status != "pending") || !inst.exists {
			return nil
		}
		if err != nil {
			return err
		}
		attempt++
		now := r.cfg.Now()
		switch {
		case execErr == nil || IsDefinite(execErr):
			o := Outcome{Step: s.id.step, Kind: s.kind, Name: s.name, OK: execErr == nil}
			stepStatus, result, lastErr := "done", []byte(nil), (*string)(nil)
			if o.OK {
				outcome = StepOK
				// What is kept is what is decided on (a retry decides it again).
				if o.Result, err = r.w.redact(&inst, jsonOrString(res)); err != nil {
					return err
				}
				result = o.Result
			} else {
				outcome, o.Reason = StepRejected, reasonOf(execErr)
				stepStatus = "rejected"
				result, _ = json.Marshal(map[string]string{"reason": inst.freeText(o.Reason)})
				reason := inst.freeText(clip(o.Reason, 2000))
				lastErr = &reason
			}
			if _, err := tx.Exec(ctx, `UPDATE process_steps SET status = $5, attempts = $6, next_attempt_at = NULL, result = $7, last_error = $8, finished_at = $9
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND step = $4`,
				s.id.tenant, r.name, s.id.instance, s.id.step, stepStatus, attempt, result, lastErr, now); err != nil {
				return err
			}
			return r.decideOther(ctx, tx, &inst, Input{Kind: InputOutcome, Instance: inst.instance, Tenant: domain.TenantID(inst.tenant), At: now, Outcome: &o})
		case attempt >= r.cfg.Attempts || errors.Is(execErr, errUnknownStep):
			outcome = StepParked
			cause := fmt.Sprintf("%s %s (step %s) failed %d times: %s", s.kind, s.name, s.id.step, attempt, errText(execErr))
			if _, err := tx.Exec(ctx, `UPDATE process_steps SET status = 'parked', attempts = $5, next_attempt_at = NULL, last_error = $6
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND step = $4`,
				s.id.tenant, r.name, s.id.instance, s.id.step, attempt, inst.freeText(errText(execErr))); err != nil {
				return err
			}
			rec, err := r.w.letterRecord(&inst, letterInput{Process: r.name, Instance: inst.instance, Kind: "step", Step: s.id.step, At: now})
			if err != nil {
				return err
			}
			sum := inputSummary{Step: s.id.step, Kind: s.kind, Name: s.name}
			if err := r.w.park(ctx, tx, &inst, rec, cause, attempt, sum); err != nil {
				return err
			}
		default:
			outcome = StepError
			if _, err := tx.Exec(ctx, `UPDATE process_steps SET attempts = $5, next_attempt_at = $6, last_error = $7
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND step = $4`,
				s.id.tenant, r.name, s.id.instance, s.id.step, attempt, now.Add(r.cfg.backoff(attempt)), inst.freeText(errText(execErr))); err != nil {
				return err
			}
		}
		return r.hook("outcome")
	})
	if err != nil {
		return "", attempt, err
	}
	return outcome, attempt, nil
}

// decideOther decides an outcome or a timeout for inst: recorded as
// ignored when the instance is done, parked behind when it is parked,
// parking it when the decision fails.
func (r *Runner) decideOther(ctx context.Context, tx pgx.Tx, inst *instanceRow, in Input) error {
	letter := func() (letterInput, inputSummary) {
		li := letterInput{Process: r.name, Instance: inst.instance, Kind: string(in.Kind), Outcome: in.Outcome, Timeout: in.Timeout, At: in.At}
		if in.Outcome != nil {
			li.Step = in.Outcome.Step
		}
		return li, summarize(in)
	}
	switch {
	case inst.parked:
		li, sum := letter()
		rec, err := r.w.letterRecord(inst, li)
		if err != nil {
			return err
		}
		return r.w.park(ctx, tx, inst, rec, "", 0, sum)
	case inst.done:
		return r.w.record(ctx, tx, inst, histIgnored, summarize(in), "the instance is done")
	}
	_, err := r.w.apply(ctx, tx, inst, in)
	var poison *poisonError
	if errors.As(err, &poison) {
		r.logger.Warn("process decision failed; the instance is parked", "tenant", inst.tenant, "instance", inst.instance,
			"input", string(in.Kind), "error", poison.Error())
		li, sum := letter()
		rec, err := r.w.letterRecord(inst, li)
		if err != nil {
			return err
		}
		return r.w.park(ctx, tx, inst, rec, poison.Error(), 1, sum)
	}
	return err
}

// reasonOf is the text of a definite refusal.
func reasonOf(err error) string {
	var rej *Rejected
	if errors.As(err, &rej) {
		return rej.Reason
	}
	return err.Error()
}

// jsonOrString keeps what a command or port answered as JSON: valid JSON
// as is, anything else as a JSON string, nothing as null.
func jsonOrString(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}
