package commands_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func respond(res commands.Result, err error) ([]byte, error) {
	if err != nil {
		return []byte("error: " + err.Error()), nil
	}
	return fmt.Appendf(nil, "ok %s v%d %s", res.ID, res.Version, res.Position.Token()), nil
}

// TestUnrecordedExecutionIsNotRepeated: the events of a command are in the
// stream but its idempotency record is not (a store whose events and
// records live apart crashed in between). A retry with the same key must
// record the earlier outcome, not execute again.
func TestUnrecordedExecutionIsNotRepeated(t *testing.T) {
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	h := newHandler(t, store, store)
	ctx := domain.NewContext(context.Background(), "t-a")
	if _, err := h.Handle(ctx, ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c", Currency: "EUR"}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	// The lost execution: orders.AddLine under key "k", appended without a record.
	commandID := uuid.NewSHA1(commands.EventIDSpace, []byte("t-a\x00k")).String()
	evs, err := (ordercmd.AddLine{OrderID: "o-1", ProductID: "p", Quantity: 1, UnitPrice: money.Money{Amount: 5, Currency: "EUR"}}).Decide(mustLoad(t, store), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	typ, sv, data, _ := order.Registry.Encode(evs[0])
	lost, err := store.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: "order-o-1", Expected: eventstore.Exact(1),
		Events: []eventstore.NewEvent{{ID: uuid.NewSHA1(commands.EventIDSpace, fmt.Appendf(nil, "%s/0", commandID)).String(), Type: typ, SchemaVersion: sv, Data: data,
			Metadata: event.Metadata{CommandID: commandID}}}})
	if err != nil {
		t.Fatal(err)
	}
	idem := &commands.Idempotency{Key: "k", RequestHash: "h", Respond: respond}
	res, err := h.Handle(ctx, ordercmd.AddLine{OrderID: "o-1", ProductID: "p", Quantity: 1, UnitPrice: money.Money{Amount: 5, Currency: "EUR"}}, commands.Options{Idempotency: idem})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("ok o-1 v2 %s", lost.Position.Token())
	if string(res.Replayed) != want {
		t.Fatalf("retry answered %q, want the lost execution's outcome %q", res.Replayed, want)
	}
	recs, _ := store.ReadStream(ctx, "t-a", "order-o-1", 0)
	if len(recs) != 2 {
		t.Fatalf("the command executed again: %d events", len(recs))
	}
	// And the outcome is now recorded.
	res, err = h.Handle(ctx, ordercmd.AddLine{OrderID: "o-1", ProductID: "p", Quantity: 1, UnitPrice: money.Money{Amount: 5, Currency: "EUR"}}, commands.Options{Idempotency: idem})
	if err != nil || string(res.Replayed) != want {
		t.Fatalf("second retry: %q %v", res.Replayed, err)
	}
}

func mustLoad(t *testing.T, s eventstore.Store) *order.Order {
	t.Helper()
	recs, err := s.ReadStream(context.Background(), "t-a", "order-o-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ps []event.Payload
	for _, r := range recs {
		p, err := order.Registry.DecodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	o, err := order.Load(ps)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestNoTenantFailsClosed(t *testing.T) {
	h := newHandler(t, nil, nil)
	if _, err := h.Handle(context.Background(), ordercmd.PlaceOrder{OrderID: "o"}, commands.Options{}); err != eventstore.ErrNoTenant {
		t.Fatalf("got %v, want ErrNoTenant", err)
	}
}

// Two processes (two handlers, two caches) write the same order: the stale
// cache of one is caught by the append's expected version and reloaded,
// never trusted.
func TestStaleCacheIsReloaded(t *testing.T) {
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	a, b := newHandler(t, store, store), newHandler(t, store, store)
	ctx := domain.NewContext(context.Background(), "t-a")
	line := func(p string) ordercmd.AddLine {
		return ordercmd.AddLine{OrderID: "o-1", ProductID: p, Quantity: 1, UnitPrice: money.Money{Amount: 5, Currency: "EUR"}}
	}
	steps := []struct {
		h   *commands.Handler[*order.Order]
		cmd ordercmd.Command
	}{
		{a, ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c", Currency: "EUR"}},
		{a, line("p-1")}, // a's cache: version 2
		{b, line("p-2")}, // b loads from the store: version 3
		{a, line("p-3")}, // a's cache is stale (2): conflict, reload, version 4
		{b, ordercmd.PlaceOrder{OrderID: "o-1"}},
	}
	for i, s := range steps {
		res, err := s.h.Handle(ctx, s.cmd, commands.Options{})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Version != int64(i+1) {
			t.Fatalf("step %d at version %d, want %d", i, res.Version, i+1)
		}
	}
	o := mustLoad(t, store)
	if len(o.Lines) != 3 || o.Status != order.StatusPlaced {
		t.Fatalf("order has %d lines, status %s", len(o.Lines), o.Status)
	}
	// A create of an existing order, answered from no cache at all, still
	// says so (after a conflict and a reload).
	c := newHandler(t, store, store)
	if _, err := c.Handle(ctx, ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c", Currency: "EUR"}, commands.Options{}); !errors.Is(err, order.ErrAlreadyExists) {
		t.Fatalf("create of an existing order: %v", err)
	}
}

func newHandler(t *testing.T, store eventstore.Store, idem eventstore.IdempotencyStore) *commands.Handler[*order.Order] {
	t.Helper()
	h, err := commands.NewHandler(ordercmd.Aggregate, store, idem, commands.Config{Registry: order.Registry})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
