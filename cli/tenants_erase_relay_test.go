package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections/relay"
	"github.com/strata-es/strata/tenancy"
)

// gatedPublisher holds a batch that carries a message of tenant hold at
// its gate until release is closed: the relay has read the tenant's
// events and not yet published them.
type gatedPublisher struct {
	message.Publisher
	hold    string
	held    chan struct{} // closed when a batch waits at the gate
	release chan struct{}
	once    sync.Once
}

func (g *gatedPublisher) Publish(topic string, msgs ...*message.Message) error {
	for _, m := range msgs {
		if m.Metadata.Get(relay.MetaTenant) == g.hold {
			g.once.Do(func() { close(g.held) })
			<-g.release
			break
		}
	}
	return g.Publisher.Publish(topic, msgs...)
}

// TestEraseWaitsForTheRelay (issue 29, finding 3): the NATS relay has
// read acme's events and is held before publishing them; the erasure's
// quiescence waits for it (the relay's lease is of its own family, which
// the liveness check knows), destroying nothing meanwhile; released, the
// relay publishes and advances, the erasure finishes, and afterwards no
// message of acme is on its subjects and no row of acme is in
// projection_ledger (the relay's completeness ledger), while beta's
// messages stay.
func TestEraseWaitsForTheRelay(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := testdb.New(t, examples.All().Lines()...)
	owner, err := db.OpenPool(ctx, d.AdminURL, db.PoolConfig{Role: db.RoleProjector, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	var b [4]byte
	_, _ = rand.Read(b[:])
	topic := "erase_relay_" + hex.EncodeToString(b[:])
	vars := map[string]string{"DATABASE_URL": d.AdminURL, "STRATA_RELAY_URL": testNATS, "STRATA_RELAY_TOPIC": topic}
	store, err := newTenantStore(exampleEnv(testEnv(vars)), owner)
	if err != nil {
		t.Fatal(err)
	}
	actor := tenancy.Actor{Subject: "cli:test"}
	for _, id := range []domain.TenantID{"acme", "beta"} {
		if _, err := store.Provision(ctx, actor, tenancy.ProvisionRequest{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := pgx.Connect(ctx, d.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	for _, tn := range []string{"acme", "beta"} {
		if _, err := admin.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
			SELECT $1, 's-1', g, gen_random_uuid(), 'thing.happened', 1, jsonb_build_object('n', g), '{}' FROM generate_series(1, 5) g`, tn); err != nil {
			t.Fatal(err)
		}
	}

	nc, err := nats.Connect(testNATS)
	if err != nil {
		t.Fatalf("NATS at %s: %v", testNATS, err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(topic) }()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, err := relay.NewNATSPublisher(relay.NATSConfig{URL: testNATS, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	gate := &gatedPublisher{Publisher: pub, hold: "acme", held: make(chan struct{}), release: make(chan struct{})}
	released := sync.OnceFunc(func() { close(gate.release) })
	defer released()
	r, err := relay.New(postgres.New(nil, d.Projector), d.Projector, relay.Config{Topic: topic, Publisher: gate,
		PollInterval: 20 * time.Millisecond, LeaseRetry: 50 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = r.Run(rctx) }()
	defer func() { stopRelay(); <-relayDone }()
	select {
	case <-gate.held:
	case <-ctx.Done():
		t.Fatal("the relay never read acme's events")
	}

	waiting := make(chan struct{})
	var once sync.Once
	er, closeEr, err := newEraser(exampleEnv(testEnv(vars)), owner, store, logger, eraseFlags{quiesceTimeout: time.Minute}, func(p tenancy.Progress) {
		if p.Step == tenancy.StepQuiesce && strings.Contains(p.Message, r.Name()) {
			once.Do(func() { close(waiting) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeEr()
	type result struct {
		w   tenancy.Erasure
		err error
	}
	done := make(chan result, 1)
	go func() {
		w, err := er.Erase(ctx, actor, "acme", "relay test")
		done <- result{w, err}
	}()
	var res result
	select {
	case <-waiting:
		var events int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.events WHERE tenant_id = 'acme'`).Scan(&events); err != nil {
			t.Fatal(err)
		}
		if events != 5 {
			t.Errorf("acme's events while the erasure waits for the relay: %d, want 5 (nothing destroyed)", events)
		}
		released()
		res = <-done
	case res = <-done:
		t.Errorf("the erasure finished (%v) while the relay held acme's events unpublished: quiescence did not wait for %s", res.err, r.Name())
		released()
	}
	if res.err != nil {
		t.Fatalf("erase: %v", res.err)
	}
	if res.w.Receipt == nil || !slices.Contains(res.w.Receipt.Quiesce.RunnersWaitedOn, r.Name()) {
		t.Errorf("receipt's quiescence %+v: the relay is not among the runners waited on", res.w.Quiesce)
	}
	// The relay has published its batch and moved its checkpoint (and
	// its ledger) past it.
	waitUntil(t, 30*time.Second, func() bool {
		return r.Status().Published >= 10 && natsCount(t, js, topic, topic+".beta.>") == 5
	}, "the relay published the held batch")
	waitUntil(t, 30*time.Second, func() bool {
		var passed bool
		if err := admin.QueryRow(ctx, `SELECT (c.pos_major, c.pos_minor) >= (h.tx::numeric, h.pos::numeric) FROM strata.projection_checkpoints c,
			(SELECT tx_id::text AS tx, position AS pos FROM strata.events ORDER BY tx_id DESC, position DESC LIMIT 1) h
			WHERE c.projection = $1`, r.Name()).Scan(&passed); err != nil {
			t.Fatal(err)
		}
		return passed
	}, "the relay's checkpoint past the batch")
	if n := natsCount(t, js, topic, topic+".acme.>"); n != 0 {
		t.Errorf("%d messages of the erased tenant on its subjects after the erasure", n)
	}
	var ledger int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM strata.projection_ledger WHERE tenant_id = 'acme'`).Scan(&ledger); err != nil {
		t.Fatal(err)
	}
	if ledger != 0 {
		t.Errorf("%d projection_ledger rows of the erased tenant after the erasure", ledger)
	}
}
