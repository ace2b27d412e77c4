package fulfilcmd_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/process/processtest"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/ordercmd"
	"github.com/strata-es/strata/projections"
)

// TestImportedPoisonStopsNoOtherTenant is issue 29's finding 2 as it was
// found, through the real runtime: tenant t-a's log holds an
// order.created whose order_id (and stream) is not a valid ID and an
// order.placed whose amount is a string, as an import or an old writer
// could leave them. Tenant t-b's order, placed after them, is reserved
// (awaiting_payment) by the same fulfilment runner, which settles without
// ever failing on the log (processtest fails the test if it does); t-a's
// two streams are parked in the dead-letter store.
func TestImportedPoisonStopsNoOtherTenant(t *testing.T) {
	t.Parallel()
	rt := processtest.NewRuntime(t, processtest.RuntimeConfig{Registry: registry})
	ctx := context.Background()
	specs, err := fulfilcmd.Processes(fulfilcmd.Config{}, rt.Deps())
	if err != nil {
		t.Fatal(err)
	}
	raw := func(stream, typ, data string) {
		t.Helper()
		if _, err := rt.Store.Append(ctx, eventstore.AppendRequest{Tenant: "t-a", Stream: stream, Expected: eventstore.Any,
			Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: typ, SchemaVersion: 1, Data: []byte(data)}}}); err != nil {
			t.Fatal(err)
		}
	}
	raw("order-bad id", order.TypeCreated, `{"order_id":"bad id","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`)
	raw("order-o-9", order.TypeCreated, `{"order_id":"o-9","customer_id":"c-1","currency":"EUR","at":"2026-01-01T00:00:00Z"}`)
	raw("order-o-9", order.TypePlaced, `{"order_id":"o-9","total":{"amount":"4200","currency":"EUR"},"at":"2026-01-01T00:00:00Z"}`)

	b := domain.NewContext(ctx, "t-b")
	orders, err := commands.NewHandler(ordercmd.Aggregate, rt.Store, rt.Store, rt.Deps().Config)
	if err != nil {
		t.Fatal(err)
	}
	items, err := commands.NewHandler(stockcmd.Aggregate, rt.Store, rt.Store, rt.Deps().Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := items.Handle(b, stockcmd.Receive{SKU: "p-1", Quantity: 5}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []ordercmd.Command{
		ordercmd.CreateOrder{OrderID: "o-1", CustomerID: "c-1", Currency: "EUR"},
		ordercmd.AddLine{OrderID: "o-1", ProductID: "p-1", Quantity: 2, UnitPrice: money.Money{Amount: 250, Currency: "EUR"}},
		ordercmd.PlaceOrder{OrderID: "o-1"},
	} {
		if _, err := orders.Handle(b, c, commands.Options{}); err != nil {
			t.Fatal(err)
		}
	}

	rt.Start(specs[0])
	rt.Settle()
	if in := rt.Instance("t-b", "o-1"); in.Status != "awaiting_payment" {
		t.Errorf("t-b's order is %s, want awaiting_payment (reserved)", in.Status)
	}
	letters, err := projections.ReadDeadLetters(ctx, rt.Projector, []string{"t-a", "t-b"}, projections.LetterFilter{Projections: []string{fulfilcmd.Name}})
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
	if in := rt.Instance("t-a", "o-9"); !in.Parked {
		t.Errorf("o-9 (draft, then a placed it cannot decode) = %+v: want parked", in.Instance)
	}
}
