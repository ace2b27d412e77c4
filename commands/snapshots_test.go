package commands_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/customers/customer"
	"github.com/strata-es/strata/examples/customers/customercmd"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/inventory/stockcmd"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/personal"
)

func stockHandler(t *testing.T, store *postgres.Store, agg commands.Aggregate[*stock.Item]) *commands.Handler[*stock.Item] {
	t.Helper()
	// Writers that keep coming back to one SKU can lose many rounds in a
	// row; what this test examines is the snapshots, not that starvation.
	h, err := commands.NewHandler(agg, store, store, commands.Config{Registry: event.NewRegistry(stock.Codecs()...), MaxAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// adminPool connects as the superuser in strata's schema (setup and
// fault injection only).
func adminPool(t *testing.T, d *testdb.DB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	admin, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return admin
}

func deleteSnapshots(t *testing.T, admin *pgxpool.Pool) int64 {
	t.Helper()
	tag, err := admin.Exec(context.Background(), `DELETE FROM aggregate_snapshots`)
	if err != nil {
		t.Fatal(err)
	}
	return tag.RowsAffected()
}

// TestSnapshotsAreNeverRequired: 8 writers receive stock on one SKU (a
// snapshot every 10 events) while another goroutine deletes every
// snapshot as fast as it can: no command fails, none is lost, and the
// state equals the one rebuilt from the whole stream. Then a snapshot of
// another Version is ignored, and replaced.
func TestSnapshotsAreNeverRequired(t *testing.T) {
	d := testdb.New(t)
	admin := adminPool(t, d)
	store := postgres.New(d.App, d.Projector, postgres.WithGroupCommit(postgres.GroupConfig{}))
	agg := stockcmd.Aggregate
	snaps := *agg.Snapshots
	snaps.Every = 10
	agg.Snapshots = &snaps
	h := stockHandler(t, store, agg)
	ctx := domain.NewContext(context.Background(), "t-a")

	const writers, each = 4, 80
	stop := make(chan struct{})
	var deleted int64
	var deleter sync.WaitGroup
	deleter.Add(1)
	go func() {
		defer deleter.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				deleted += deleteSnapshots(t, admin)
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := h.Handle(ctx, stockcmd.Receive{SKU: "sku-1", Quantity: 1}, commands.Options{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	deleter.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a command failed while snapshots were deleted: %v", err)
	}
	if deleted == 0 {
		t.Fatal("no snapshot was taken (and deleted) during the run")
	}
	full := func() *stock.Item {
		recs, err := store.ReadStream(ctx, "t-a", stock.StreamID("sku-1"), 0)
		if err != nil {
			t.Fatal(err)
		}
		payloads := make([]event.Payload, len(recs))
		for i, r := range recs {
			if payloads[i], err = event.NewRegistry(stock.Codecs()...).DecodeRecord(r); err != nil {
				t.Fatal(err)
			}
		}
		it, err := stock.Load(payloads)
		if err != nil {
			t.Fatal(err)
		}
		return it
	}
	if it := full(); it.OnHand != writers*each || it.Version != writers*each {
		t.Fatalf("after the run: %d on hand at version %d, want %d", it.OnHand, it.Version, writers*each)
	}

	// Without the deleter, a snapshot is there, and the next command
	// resumes from it.
	for range 10 {
		if _, err := h.Handle(ctx, stockcmd.Receive{SKU: "sku-1", Quantity: 1}, commands.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	schema := func(v int) string {
		return fmt.Sprintf("inventory item/v%d/%s", v, event.NewRegistry(stock.Codecs()...).Fingerprint())
	}
	snap, found, tail, err := store.ReadSnapshotted(ctx, "t-a", stock.StreamID("sku-1"), schema(1))
	if err != nil || !found || snap.Version+int64(len(tail)) != writers*each+10 || len(tail) >= 10 {
		t.Fatalf("snapshot %v at %d, %d events after it, %v", found, snap.Version, len(tail), err)
	}
	// A planted snapshot at the right schema but a wrong state (its
	// version does not add up) is not believed.
	if _, err := admin.Exec(context.Background(), `UPDATE aggregate_snapshots SET data = $1`,
		append([]byte{'p'}, `{"SKU":"sku-1","OnHand":5,"Version":3,"Reservations":{}}`...)); err != nil {
		t.Fatal(err)
	}
	res, err := h.Handle(ctx, stockcmd.Receive{SKU: "sku-1", Quantity: 1}, commands.Options{})
	if err != nil || res.Version != writers*each+11 {
		t.Fatalf("after a planted snapshot: %+v, %v", res, err)
	}
	// Version 2 of the encoding ignores version 1's snapshot and replaces it.
	snaps2 := snaps
	snaps2.Version = 2
	agg.Snapshots = &snaps2
	h2 := stockHandler(t, store, agg)
	for range 10 {
		if _, err := h2.Handle(ctx, stockcmd.Receive{SKU: "sku-1", Quantity: 1}, commands.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, found, _, _ := store.ReadSnapshotted(ctx, "t-a", stock.StreamID("sku-1"), schema(1)); found {
		t.Fatal("version 1's snapshot is still there")
	}
	if snap, found, _, _ := store.ReadSnapshotted(ctx, "t-a", stock.StreamID("sku-1"), schema(2)); !found || snap.Version < writers*each+11 {
		t.Fatalf("no snapshot of version 2 (%v at %d)", found, snap.Version)
	}
	if it := full(); it.OnHand != writers*each+21 {
		t.Fatalf("%d on hand, want %d", it.OnHand, writers*each+21)
	}
}

// TestSnapshotOfAForgottenSubject: a stream with personal data has its
// snapshot sealed with the subject's key (no address in it in plaintext);
// once the key is destroyed the snapshot is ignored and the state rebuilt
// from the events, whose fields read as tombstones.
func TestSnapshotOfAForgottenSubject(t *testing.T) {
	d := testdb.New(t)
	admin := adminPool(t, d)
	store := postgres.New(d.App, d.Projector)
	ctx := domain.NewContext(context.Background(), "t-a")
	keyring := personal.NewKeyring(d.App, personal.DatabaseKEKs(ctx, d.App, nil), personal.Config{})
	reg := event.NewRegistry(customer.Codecs()...).Protect(keyring)
	agg := customercmd.Aggregate
	agg.Snapshots = &commands.Snapshots[*customer.Customer]{Version: 1, Every: 1,
		Encode: func(c *customer.Customer) ([]byte, error) {
			return fmt.Appendf(nil, "%s|%s|%d", c.ID, c.Email, c.Version), nil
		},
		Decode: func(b []byte) (*customer.Customer, error) {
			c := &customer.Customer{}
			_, err := fmt.Sscanf(string(bytes.ReplaceAll(b, []byte("|"), []byte(" "))), "%s %s %d", &c.ID, &c.Email, &c.Version)
			return c, err
		},
		Resume: func(c *customer.Customer, tail []event.Payload) (*customer.Customer, error) {
			for _, p := range tail {
				if e, ok := p.(customer.EmailChanged); ok {
					c.Email = e.To
				}
				c.Version++
			}
			return c, nil
		},
	}
	h, err := commands.NewHandler(agg, store, store, commands.Config{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Handle(ctx, customercmd.Register{Customer: "c-1", FullName: "Ann", Email: "ann@example.com"}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Handle(ctx, customercmd.ChangeEmail{Customer: "c-1", Email: "ann@work.example"}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	var data []byte
	var version int64
	if err := admin.QueryRow(context.Background(), `SELECT data, stream_version FROM aggregate_snapshots WHERE stream_id = 'customer-c-1'`).Scan(&data, &version); err != nil {
		t.Fatal(err)
	}
	if version != 2 || data[0] != 's' || bytes.Contains(data, []byte("ann")) {
		t.Fatalf("snapshot at %d: %q, want it sealed", version, data)
	}
	// Forget her: the snapshot no longer opens; the state comes from the
	// events, her addresses tombstones. A command on c-1 (its events name
	// their subject, who gets a new key) starts from that state.
	keyID, err := personal.Destroy(ctx, admin, "t-a", "c-1")
	if err != nil || keyID == "" {
		t.Fatalf("destroy: %q, %v", keyID, err)
	}
	keyring.Forget("t-a", "c-1", keyID)
	if _, err := h.Handle(ctx, customercmd.ChangeEmail{Customer: "c-1", Email: "x@example.com"}, commands.Options{}); err != nil {
		t.Fatal(err)
	}
	recs, err := store.ReadStream(ctx, "t-a", customer.StreamID("c-1"), 2)
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d events after version 2, %v", len(recs), err)
	}
	p, err := reg.DecodeRecord(recs[0])
	if err != nil {
		t.Fatal(err)
	}
	if e := p.(customer.EmailChanged); e.From != customer.Erased || e.To != "x@example.com" {
		t.Fatalf("decided on %+v: the state did not come from the shredded events", e)
	}
	// No snapshot is taken under the destroyed key, which the stream's
	// earlier events name: the one there stays, unopenable.
	if err := admin.QueryRow(context.Background(), `SELECT stream_version FROM aggregate_snapshots WHERE stream_id = 'customer-c-1'`).Scan(&version); err != nil || version != 2 {
		t.Fatalf("snapshot at %d after the erasure (%v), want the one before it", version, err)
	}
}

// TestSnapshotsBySize: with EveryBytes, a snapshot is taken by the command
// that takes the data after the last one to that many bytes, however few
// events that is; without it, not before Every events.
func TestSnapshotsBySize(t *testing.T) {
	for _, everyBytes := range []int64{0, 300} {
		t.Run(fmt.Sprintf("EveryBytes=%d", everyBytes), func(t *testing.T) {
			d := testdb.New(t)
			admin := adminPool(t, d)
			store := postgres.New(d.App, d.Projector)
			agg := stockcmd.Aggregate
			snaps := *agg.Snapshots
			snaps.Every, snaps.EveryBytes = 1000, everyBytes
			agg.Snapshots = &snaps
			h := stockHandler(t, store, agg)
			ctx := domain.NewContext(context.Background(), "t-a")
			for range 12 {
				if _, err := h.Handle(ctx, stockcmd.Receive{SKU: "s", Quantity: 1}, commands.Options{}); err != nil {
					t.Fatal(err)
				}
			}
			recs, err := store.ReadStream(ctx, "t-a", stock.StreamID("s"), 0)
			if err != nil {
				t.Fatal(err)
			}
			// The versions at which the data since the last snapshot
			// reached everyBytes: where snapshots were due.
			var due []int64
			var since int64
			for _, r := range recs {
				if since += int64(len(r.Data)); everyBytes > 0 && since >= everyBytes {
					due, since = append(due, r.Version), 0
				}
			}
			var version int64
			err = admin.QueryRow(context.Background(), `SELECT stream_version FROM aggregate_snapshots WHERE stream_id = $1`, stock.StreamID("s")).Scan(&version)
			switch {
			case everyBytes == 0 && !errors.Is(err, pgx.ErrNoRows):
				t.Fatalf("12 events, Every 1000, no EveryBytes: snapshot at %d (%v), want none", version, err)
			case everyBytes == 0:
			case len(due) < 2:
				t.Fatalf("12 events of %d bytes each reached %d bytes only %d times: the test needs more", len(recs[0].Data), everyBytes, len(due))
			case err != nil || version != due[len(due)-1]:
				t.Fatalf("latest snapshot at version %d (%v), want %d (due at %v)", version, err, due[len(due)-1], due)
			}
		})
	}
}
