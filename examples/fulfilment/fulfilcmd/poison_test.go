package fulfilcmd_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
)

// TestImportedPoisonStopsNoOtherTenant is issue 29's finding 2 as it was
// found, through the real runtime: tenant t-a's log holds an
// order.created whose order_id (and stream) is not a valid ID and an
// order.placed whose amount is a string, as an import or an old writer
// could leave them. Tenant t-b's order, placed after them, is reserved
// (awaiting_payment) by the same fulfilment runner, whose checkpoint never
// errs; t-a's two streams are parked in the dead-letter store.
func TestImportedPoisonStopsNoOtherTenant(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	deps := commandapi.Deps{Store: store, Idempotency: store, Config: commands.Config{Registry: registry}}
	specs, err := fulfilcmd.Processes(fulfilcmd.Config{}, deps)
	if err != nil {
		t.Fatal(err)
	}
	raw := func(stream, typ, data string) {
		t.Helper()
		if _, err := store.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: stream, Expected: eventstore.Any,
			Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: typ, SchemaVersion: 1, Data: []byte(data)}}}); err != nil {
			t.Fatal(err)
		}
	}
	raw("order-bad id", order.TypeCreated, `{"order_id":"bad id","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`)
	raw("order-o-9", order.TypeCreated, `{"order_id":"o-9","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`)
	raw("order-o-9", order.TypePlaced, `{"order_id":"o-9","total":{"amount":"4200","currency":"EUR"},"at":"2026-01-01T00:00:00Z"}`)

	b := domain.NewContext(ctx, "t-b")
	orders, err := commands.NewHandler(ordercmd.Aggregate, store, store, deps.Config)
	if err != nil {
		t.Fatal(err)
	}
	items, err := commands.NewHandler(stockcmd.Aggregate, store, store, deps.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := items.Handle(b, stockcmd.Receive{SKU: "p-1", Quantity: 5}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []ordercmd.Command{
		ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"},
		ordercmd.AddLine{OrderID: "o-1", ProductID: "p-1", Quantity: 2, UnitPrice: order.Money{Amount: 250, Currency: "EUR"}},
		ordercmd.PlaceOrder{OrderID: "o-1"},
	} {
		if _, err := orders.Handle(b, c, commands.Options{}); err != nil {
			t.Fatal(err)
		}
	}

	r, err := process.NewRunner(specs[0], store, d.Projector, process.RunnerConfig{Registry: registry,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Poll: 20 * time.Millisecond, LeaseRetry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	defer func() { stop(); <-done }()

	for {
		if s := r.Status(); s.State == process.StateError {
			t.Fatalf("the fulfilment process stopped for every tenant: %s", s.LastError)
		}
		in, err := process.ReadInstance(ctx, d.Projector, "t-b", fulfilcmd.Name, "o-1")
		if err == nil && in.Status == "awaiting_payment" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("t-b's order was never reserved: %+v, %v", in.Instance, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	letters, err := projections.ReadDeadLetters(ctx, d.Projector, []string{"t-a", "t-b"}, projections.LetterFilter{Projections: []string{fulfilcmd.Name}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, l := range letters {
		got[l.Tenant+"/"+l.Event.Stream]++
	}
	if len(got) != 2 || got["t-a/order-bad id"] != 1 || got["t-a/order-o-9"] != 1 {
		t.Errorf("dead letters by stream = %v, want t-a's two poisoned streams", got)
	}
	if in, err := process.ReadInstance(ctx, d.Projector, "t-a", fulfilcmd.Name, "o-9"); err != nil || !in.Parked {
		t.Errorf("o-9 (draft, then a placed it cannot decode) = %+v, %v: want parked", in.Instance, err)
	}
}
