package process

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
)

// TestDoneInstanceIgnoresEvents: events for an instance that is done are
// recorded in its history as ignored, never decided.
func TestDoneInstanceIgnoresEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.start(b.runner(RunnerConfig{}))
	b.append("t-a", ticketOpened{ID: "k1"})
	// Both outcomes recorded (the status may read waiting after the first).
	b.eventually("k1 waiting with both outcomes", func() bool {
		d, _ := b.instance("t-a", "k1")
		return d.Status == "waiting" && len(d.History) == 3 && d.PendingSteps == 0
	})
	b.append("t-a", ticketClosed{ID: "k1"})
	b.append("t-a", ticketOpened{ID: "k1", Title: "poison"}) // would park it if decided
	b.append("t-a", ticketClosed{ID: "k1"})
	var d InstanceDetail
	b.eventually("the late events in k1's history", func() bool {
		d, _ = b.instance("t-a", "k1")
		return len(d.History) == 6
	})
	if got := strings.Join(historyKinds(d), ","); got != "event,outcome,outcome,event,ignored,ignored" {
		t.Errorf("history = %s", got)
	}
	if d.Status != "closed" || d.Parked || d.Inputs != 4 {
		t.Errorf("instance = %+v", d.Instance)
	}
}

// TestSameStepDecidedTwiceIsInsertedOnce: a duplicate delivery of an
// opening (two events in one batch, both deciding step "assign") inserts
// one step, executed once; both events are in the history.
func TestSameStepDecidedTwiceIsInsertedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.append("t-a", ticketOpened{ID: "k1"})
	b.append("t-a", ticketOpened{ID: "k1"})
	b.start(b.runner(RunnerConfig{}))
	d := b.statusIs("t-a", "k1", "waiting")
	if got := strings.Join(historyKinds(d), ","); got != "event,event,outcome,outcome" {
		t.Errorf("history = %s", got)
	}
	if len(d.Steps) != 2 || d.Steps[0].Attempts != 1 {
		t.Errorf("steps = %+v", d.Steps)
	}
	if n := b.count(`SELECT count(*) FROM events WHERE stream_id = 'assign-k1'`); n != 1 {
		t.Errorf("assignment events = %d", n)
	}
}

// TestOperatorReadsUnderRLS: the operator's reads see one tenant's rows
// under that tenant's setting, never another's, and the app role sees
// nothing without a tenant.
func TestOperatorReadsUnderRLS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.port.set(func(p *testPort) { p.fail["b-stuck"] = -1 })
	b.start(b.runner(RunnerConfig{Attempts: 1000, MaxBackoff: time.Hour, InitialBackoff: time.Hour}))
	b.append("t-a", ticketOpened{ID: "a1"})
	b.append("t-a", ticketOpened{ID: "a2"})
	b.append("t-b", ticketOpened{ID: "b1"})
	b.append("t-b", ticketOpened{ID: "b-stuck"})
	b.statusIs("t-a", "a1", "waiting")
	b.statusIs("t-a", "a2", "waiting")
	b.statusIs("t-b", "b1", "waiting")
	b.statusIs("t-b", "b-stuck", "notifying")
	b.append("t-a", ticketClosed{ID: "a2"})
	b.statusIs("t-a", "a2", "closed")

	list, err := ListInstances(b.ctx, b.app, []string{"t-a"}, InstanceFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Instance != "a1" || list[1].Instance != "a2" || list[0].Tenant != "t-a" || list[0].PendingDeadlines != 1 {
		t.Errorf("t-a's instances = %+v", list)
	}
	if _, err := ReadInstance(b.ctx, b.app, "t-a", "ticket", "b1"); !errors.Is(err, ErrInstanceNotFound) {
		t.Errorf("t-a reading t-b's instance: %v, want ErrInstanceNotFound", err)
	}
	d, err := ReadInstance(b.ctx, b.app, "t-b", "ticket", "b1")
	if err != nil || d.Tenant != "t-b" || len(d.History) != 3 || string(d.State) == "" {
		t.Errorf("t-b's own instance: %+v, %v", d, err)
	}
	counts, err := CountByStatus(b.ctx, b.app, []string{"t-a"})
	if err != nil {
		t.Fatal(err)
	}
	if c := counts["ticket"]; len(c) != 2 || c["waiting"] != 1 || c["closed"] != 1 {
		t.Errorf("t-a's counts = %v", counts)
	}
	counts, _ = CountByStatus(b.ctx, b.app, []string{"t-a", "t-b"})
	if c := counts["ticket"]; c["waiting"] != 2 || c["notifying"] != 1 {
		t.Errorf("counts over both tenants = %v", counts)
	}
	// Stuck: not done, no decision for longer than the threshold.
	stuck, err := ListInstances(b.ctx, b.app, []string{"t-a", "t-b"}, InstanceFilter{StuckFor: time.Minute, Now: time.Now().Add(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range stuck {
		ids = append(ids, in.Instance)
	}
	if strings.Join(ids, ",") != "a1,b-stuck,b1" {
		t.Errorf("stuck instances = %v", ids)
	}
	notifying, _ := ListInstances(b.ctx, b.app, []string{"t-a", "t-b"}, InstanceFilter{Status: "notifying"})
	if len(notifying) != 1 || notifying[0].Instance != "b-stuck" || notifying[0].PendingSteps != 1 {
		t.Errorf("notifying = %+v", notifying)
	}
	if over, err := OverdueByProcess(b.ctx, b.app, []string{"t-a", "t-b"}, time.Now().Add(2*time.Hour)); err != nil || over["ticket"].Deadlines != 3 {
		t.Errorf("overdue = %+v, %v", over, err)
	}

	// Every table, straight: the app role under t-a's setting sees only
	// t-a's rows, and nothing at all without a tenant.
	for _, table := range []string{"process_instances", "process_steps", "process_deadlines", "process_history"} {
		err := pgx.BeginFunc(b.ctx, b.app, func(tx pgx.Tx) error {
			var none int64
			if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM `+table).Scan(&none); err != nil {
				return err
			}
			if none != 0 {
				t.Errorf("%s: %d rows visible without a tenant", table, none)
			}
			if err := db.SetTenant(b.ctx, tx, "t-a"); err != nil {
				return err
			}
			var foreign int64
			if err := tx.QueryRow(b.ctx, `SELECT count(*) FROM `+table+` WHERE tenant_id <> 't-a'`).Scan(&foreign); err != nil {
				return err
			}
			if foreign != 0 {
				t.Errorf("%s: %d rows of another tenant visible to t-a", table, foreign)
			}
			_, err := tx.Exec(b.ctx, `UPDATE `+table+` SET tenant_id = tenant_id`)
			if err == nil || db.SQLState(err) != "42501" {
				t.Errorf("%s: the app role may update it (%v)", table, err)
			}
			return errors.New("rollback")
		})
		if err != nil && err.Error() != "rollback" {
			t.Errorf("%s: %v", table, err)
		}
	}
	// Every table is RLS-forced (the catalog test covers the policies).
	b.admin(func(conn *pgx.Conn) {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_class WHERE relname LIKE 'process\_%' AND relkind = 'r' AND relrowsecurity AND relforcerowsecurity`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 4 {
			t.Errorf("%d process tables with forced RLS, want 4", n)
		}
		// The projector's policy filters both ways by the tenant, and
		// nobody may TRUNCATE (the catalog test checks every table so).
		tenantExpr := "(tenant_id = current_setting('app.tenant_id'::text, true))"
		for _, table := range []string{"process_instances", "process_steps", "process_deadlines", "process_history"} {
			var full, truncate bool
			if err := conn.QueryRow(context.Background(), `SELECT
    EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = $1::regclass AND pg_get_expr(p.polqual, p.polrelid) = $2 AND pg_get_expr(p.polwithcheck, p.polrelid) = $2
            AND p.polroles = ARRAY['strata_projector'::regrole::oid]),
    has_table_privilege('strata_app', $1, 'TRUNCATE') OR has_table_privilege('strata_projector', $1, 'TRUNCATE')`, table, tenantExpr).Scan(&full, &truncate); err != nil {
				t.Fatal(err)
			}
			if !full || truncate {
				t.Errorf("%s: projector policy on the tenant both ways %v, TRUNCATE granted %v", table, full, truncate)
			}
		}
	})
}

// TestParkedInBatchOrder: a decision that fails parks its instance, and a
// later event of that instance in the same batch waits behind it, in
// order; other instances of the batch are decided.
func TestParkedInBatchOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.append("t-a", ticketOpened{ID: "p1", Title: "poison"})
	b.append("t-a", ticketOpened{ID: "k1"})
	b.append("t-a", ticketClosed{ID: "p1"})
	b.start(b.runner(RunnerConfig{}))
	b.statusIs("t-a", "k1", "waiting")
	var d InstanceDetail
	b.eventually("both of p1's events to be parked", func() bool {
		d, _ = b.instance("t-a", "p1")
		return len(d.History) == 2
	})
	if !d.Parked || strings.Join(historyKinds(d), ",") != "parked,parked" {
		t.Errorf("p1 = %+v, history %v", d.Instance, historyKinds(d))
	}
	rows := b.count(`SELECT count(*) FROM dead_letters WHERE stream_id = 'ticket-p1' AND status = 'parked'`)
	heads := b.count(`SELECT count(*) FROM parked_streams WHERE stream_id = 'ticket-p1' AND head_version = 1`)
	behind := b.count(`SELECT count(*) FROM dead_letters WHERE stream_id = 'ticket-p1' AND version = 2 AND attempts = 0`)
	if rows != 2 || heads != 1 || behind != 1 {
		t.Errorf("letters %d, head at version 1: %d, behind: %d", rows, heads, behind)
	}
}

func TestNewRunnerValidates(t *testing.T) {
	t.Parallel()
	m, err := New(ticketDefinition)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewRunner(Spec{Manager: m, Commands: map[string]CommandFunc{"x": nil}, Ports: map[string]Port{"": testPortOK, "nilfunc": PortFunc(nil)}},
		nil, nil, RunnerConfig{Attempts: -1})
	for _, want := range []string{"registry is required", "attempts -1", `command "x"`, `port ""`, `port "nilfunc"`, "event log and the projector pool"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewRunner error %v does not mention %q", err, want)
		}
	}
	_, err = NewRunner(Spec{Manager: m}, nil, nil, RunnerConfig{Registry: testRegistryWithout(typeClosed)})
	if err == nil || !strings.Contains(err.Error(), "test.closed has no codec") {
		t.Errorf("NewRunner with a registry lacking a codec: %v", err)
	}
	if _, err := NewRunner(Spec{}, nil, nil, RunnerConfig{}); err == nil {
		t.Errorf("NewRunner without a manager succeeded")
	}
}
