package replay_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

// TestDeadLetterSemantics walks the dead-letter operations through their
// cases: show, discarding a letter in the middle of a parked stream (the
// retry skips it), discarding a stream's head (the letters behind it wait
// for a retry), retrying twice, and a stream applied normally again once
// unparked.
func TestDeadLetterSemantics(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	fixed := &atomic.Bool{}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	// Version 2 of streams s and u cannot be applied until fixed.
	p := poisoned{OrderDetails: orderview.NewOrderDetails(orderview.OrderDetailsTables{}), fixed: fixed,
		bad: func(ev event.Record) bool {
			return ev.Version == 2 && (ev.Stream == "order-s" || ev.Stream == "order-u")
		}}
	ls := newLiveSide(t, d, p)
	line := func(id string, v int) event.Payload {
		return order.LineAdded{OrderID: id, ProductID: fmt.Sprintf("p-%d", v), Quantity: int64(v), UnitPrice: money.Money{Amount: 100, Currency: "EUR"}, At: at}
	}
	created := func(id string) event.Payload {
		return order.Created{OrderID: id, CustomerID: "c-1", Currency: "EUR", At: at}
	}
	appendEvents(ctx, t, ls.store, "acme", "order-s", 0, created("s"), line("s", 2), line("s", 3), line("s", 4), line("s", 5))
	appendEvents(ctx, t, ls.store, "acme", "order-u", 0, created("u"), line("u", 2), line("u", 3))
	appendEvents(ctx, t, ls.store, "acme", "order-t", 0, created("t"), line("t", 2))
	ls.waitLive(ctx, t)
	var letters []projections.DeadLetter
	waitFor(t, 10*time.Second, "both streams to be parked for good", func() bool {
		var err error
		if letters, err = ls.svc.DeadLetters(ctx, replay.ListOptions{Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
		heads := 0
		for _, l := range letters {
			if l.Head && l.Attempts == 3 && l.NextAttemptAt.IsZero() {
				heads++
			}
		}
		return heads == 2
	})
	byKey := map[string]projections.DeadLetter{}
	for _, l := range letters {
		byKey[fmt.Sprintf("%s/%d", l.Event.Stream, l.Event.Version)] = l
	}
	if len(letters) != 6 {
		t.Fatalf("%d letters, want s v2..v5 and u v2..v3", len(letters))
	}
	l, err := ls.svc.DeadLetter(ctx, "", byKey["order-s/2"].ID)
	if err != nil || !l.Head || l.Attempts != 3 || l.Error == "" {
		t.Fatalf("show the head of s: %+v %v", l, err)
	}

	// Discard s v4, in the middle: nothing is applied, s stays parked.
	if _, err := ls.svc.Discard(ctx, "acme", byKey["order-s/4"].ID, "test", ""); !errors.Is(err, replay.ErrInvalid) {
		t.Errorf("discard without a reason: %v", err)
	}
	dl, err := ls.svc.Discard(ctx, "acme", byKey["order-s/4"].ID, "test", "duplicate line")
	if err != nil || dl.Status != projections.LetterDiscarded || dl.ResolvedBy != "test" || dl.Reason != "duplicate line" {
		t.Fatalf("discard s v4: %+v %v", dl, err)
	}
	// Discard u v2, its head: u v3 waits behind nothing now but a retry.
	if _, err := ls.svc.Discard(ctx, "acme", byKey["order-u/2"].ID, "test", "bad line"); err != nil {
		t.Fatal(err)
	}
	left, err := ls.svc.DeadLetters(ctx, replay.ListOptions{Tenant: "acme", Stream: "order-u"})
	if err != nil || len(left) != 1 || !left[0].Head || left[0].Event.Version != 3 {
		t.Fatalf("after discarding u's head: %+v %v", left, err)
	}
	if cp := checkpoint(ctx, t, ls.bundle, p.Name()); cp.ParkedStreams != 2 || cp.ParkedLetters != 4 {
		t.Errorf("counts %d streams, %d letters; want 2 and 4", cp.ParkedStreams, cp.ParkedLetters)
	}

	fixed.Store(true)
	rep, err := ls.svc.Retry(ctx, replay.RetrySpec{Stream: "order-s", Tenant: "acme", Actor: "test"})
	if err != nil || len(rep.Streams) != 1 || !rep.Streams[0].Unparked || len(rep.Streams[0].Applied) != 3 {
		t.Fatalf("retry s: %+v %v", rep, err)
	}
	if _, err := ls.svc.Retry(ctx, replay.RetrySpec{Stream: "order-s", Tenant: "acme", Actor: "test"}); !errors.Is(err, replay.ErrNothingToDo) {
		t.Errorf("retry s again: %v, want ErrNothingToDo", err)
	}
	// Retrying a resolved letter by ID is nothing to do either.
	if _, err := ls.svc.Retry(ctx, replay.RetrySpec{ID: byKey["order-s/2"].ID, Actor: "test"}); !errors.Is(err, replay.ErrNothingToDo) {
		t.Errorf("retry a retried letter: %v, want ErrNothingToDo", err)
	}
	rep, err = ls.svc.Retry(ctx, replay.RetrySpec{All: true, Actor: "test"})
	if err != nil || len(rep.Streams) != 1 || rep.Streams[0].Stream != "order-u" || !rep.Streams[0].Unparked {
		t.Fatalf("retry all: %+v %v", rep, err)
	}
	// s is applied normally again.
	appendEvents(ctx, t, ls.store, "acme", "order-s", 5, line("s", 6))
	ls.waitLive(ctx, t)
	var qty, total int64
	if err := adminConn(ctx, t, d.AdminURL).QueryRow(ctx, `SELECT sum(l.quantity), max(o.total_amount) FROM order_detail_lines l
JOIN order_details o USING (tenant_id, order_id) WHERE l.tenant_id = 'acme' AND l.order_id = 's'`).Scan(&qty, &total); err != nil {
		t.Fatal(err)
	}
	if want := int64(2 + 3 + 5 + 6); qty != want || total != want*100 {
		t.Errorf("order s has %d items worth %d, want %d (v4 discarded)", qty, total, want)
	}
	if err := adminConn(ctx, t, d.AdminURL).QueryRow(ctx, `SELECT sum(quantity) FROM order_detail_lines WHERE tenant_id = 'acme' AND order_id = 'u'`).Scan(&qty); err != nil || qty != 3 {
		t.Errorf("order u has %d items, want 3 (v2 discarded): %v", qty, err)
	}
	if cp := checkpoint(ctx, t, ls.bundle, p.Name()); cp.ParkedStreams != 0 || cp.ParkedLetters != 0 {
		t.Errorf("counts %d streams, %d letters after the retries; want 0", cp.ParkedStreams, cp.ParkedLetters)
	}
}

// TestAutoRetryUnparks fixes the handler while the runner still retries a
// parked stream: the next automatic attempt applies its letters and
// unparks it, with nobody's help.
func TestAutoRetryUnparks(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, time.Minute)
	d := testdb.New(t, orderview.Migrations)
	fixed := &atomic.Bool{}
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	p := poisoned{OrderDetails: orderview.NewOrderDetails(orderview.OrderDetailsTables{}), fixed: fixed,
		bad: func(ev event.Record) bool { return ev.Version == 1 }}
	b := newBundle(t, d, p)
	runLive(t, b, p, projections.RunnerConfig{Registry: order.Registry, DeadLetters: true,
		Failures: projections.FailurePolicy{Attempts: 10, InitialDelay: 300 * time.Millisecond, MaxDelay: 300 * time.Millisecond}})
	appendEvents(ctx, t, b.store, "acme", "order-w", 0, order.Created{OrderID: "w", CustomerID: "c-1", Currency: "EUR", At: at},
		order.LineAdded{OrderID: "w", ProductID: "p-1", Quantity: 1, UnitPrice: money.Money{Amount: 100, Currency: "EUR"}, At: at})
	waitFor(t, 10*time.Second, "the stream to be parked", func() bool { return checkpoint(ctx, t, b, p.Name()).ParkedStreams == 1 })
	fixed.Store(true)
	waitFor(t, 10*time.Second, "the runner to unpark it", func() bool { return checkpoint(ctx, t, b, p.Name()).ParkedStreams == 0 })
	retried, err := b.svc.DeadLetters(ctx, replay.ListOptions{Statuses: []projections.LetterStatus{projections.LetterRetried}})
	if err != nil || len(retried) != 2 || retried[0].ResolvedBy != "runner" {
		t.Fatalf("letters %+v %v, want both retried by the runner", retried, err)
	}
}
