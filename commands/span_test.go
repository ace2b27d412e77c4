package commands_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/internal/testdb"
)

// TestSpanningCommandsKeepTheTotal: six writers move random quantities
// between three SKUs in random directions, some more than the source has
// (refused). Every command's events are all stored or none: each command
// ID has its two events on the source and its one on the destination,
// stock never goes negative, and the total on hand stays what was
// received.
func TestSpanningCommandsKeepTheTotal(t *testing.T) {
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector, postgres.WithGroupCommit(postgres.GroupConfig{}))
	reg := event.NewRegistry(stock.Codecs()...)
	sp, err := commands.NewSpanner(store, store, commands.Config{Registry: reg, MaxAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	h := stockHandler(t, store, stockcmd.Aggregate)
	ctx := domain.NewContext(context.Background(), "t-a")
	skus := []string{"a", "b", "c"}
	for _, sku := range skus {
		if _, err := h.Handle(ctx, stockcmd.Receive{SKU: sku, Quantity: 100}, commands.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	const writers, each = 6, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	moved, refused := 0, 0
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range each {
				from := rng.IntN(3)
				to := (from + 1 + rng.IntN(2)) % 3
				_, err := sp.Handle(ctx, stockcmd.Transfer{SKU: skus[from], To: skus[to], TransferID: fmt.Sprintf("t-%d-%d", w, i), Quantity: 1 + rng.Int64N(40)}, commands.Options{})
				mu.Lock()
				switch {
				case err == nil:
					moved++
				case errors.Is(err, domain.ErrRejected):
					refused++
				default:
					errs <- err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if moved == 0 || refused == 0 {
		t.Fatalf("%d moved, %d refused: the run did not exercise both", moved, refused)
	}
	byCommand := map[string][]string{}
	var total int64
	for _, sku := range skus {
		recs, err := store.ReadStream(ctx, "t-a", stock.StreamID(sku), 0)
		if err != nil {
			t.Fatal(err)
		}
		payloads := make([]event.Payload, len(recs))
		for i, r := range recs {
			if payloads[i], err = reg.DecodeRecord(r); err != nil {
				t.Fatal(err)
			}
			byCommand[r.Metadata.CommandID] = append(byCommand[r.Metadata.CommandID], sku+":"+r.Type)
		}
		it, err := stock.Load(payloads)
		if err != nil {
			t.Fatal(err)
		}
		if it.OnHand < 0 || it.Reserved != 0 {
			t.Fatalf("%s: %d on hand, %d reserved", sku, it.OnHand, it.Reserved)
		}
		total += it.OnHand
	}
	if total != 300 {
		t.Fatalf("%d units on hand in all, want the 300 received", total)
	}
	transfers := 0
	for id, evs := range byCommand {
		if len(evs) == 1 {
			continue // one of the three first receipts
		}
		transfers++
		if len(evs) != 3 {
			t.Fatalf("command %s stored %v: a part without the rest", id, evs)
		}
	}
	if transfers != moved {
		t.Fatalf("%d transfers stored, %d acknowledged", transfers, moved)
	}
}

// TestSpanningCommandIdempotency: a spanning command sent twice under one
// key runs once, and a refusal is remembered.
func TestSpanningCommandIdempotency(t *testing.T) {
	d := testdb.New(t)
	store := postgres.New(d.App, d.Projector)
	reg := event.NewRegistry(stock.Codecs()...)
	sp, err := commands.NewSpanner(store, store, commands.Config{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := domain.NewContext(context.Background(), "t-a")
	if _, err := stockHandler(t, store, stockcmd.Aggregate).Handle(ctx, stockcmd.Receive{SKU: "a", Quantity: 10}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	idem := func(key string) commands.Options {
		return commands.Options{Idempotency: &commands.Idempotency{Key: key, RequestHash: key, Respond: respond}}
	}
	first, err := sp.Handle(ctx, stockcmd.Transfer{SKU: "a", To: "b", TransferID: "r-1", Quantity: 6}, idem("k-1"))
	if err != nil || first.Version != 3 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := sp.Handle(ctx, stockcmd.Transfer{SKU: "a", To: "b", TransferID: "r-1", Quantity: 6}, idem("k-1"))
	if err != nil || string(again.Replayed) != fmt.Sprintf("ok a v3 %s", first.Position.Token()) {
		t.Fatalf("replay: %+v (%q), %v", again, again.Replayed, err)
	}
	if _, err := sp.Handle(ctx, stockcmd.Transfer{SKU: "a", To: "b", TransferID: "r-2", Quantity: 6}, idem("k-2")); !errors.Is(err, domain.ErrRejected) {
		t.Fatalf("a transfer of more than is left: %v", err)
	}
	// Stock arrives; the refusal under k-2 stands.
	if _, err := stockHandler(t, store, stockcmd.Aggregate).Handle(ctx, stockcmd.Receive{SKU: "a", Quantity: 10}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	res, err := sp.Handle(ctx, stockcmd.Transfer{SKU: "a", To: "b", TransferID: "r-2", Quantity: 6}, idem("k-2"))
	if err != nil || len(res.Replayed) == 0 {
		t.Fatalf("the refusal was not remembered: %+v, %v", res, err)
	}
	for sku, want := range map[string]int{"a": 4, "b": 1} {
		recs, err := store.ReadStream(ctx, "t-a", stock.StreamID(sku), 0)
		if err != nil || len(recs) != want {
			t.Fatalf("%s has %d events (%v), want %d", sku, len(recs), err, want)
		}
	}
}
