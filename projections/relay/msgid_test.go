package relay

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/testdb"
)

// TestRelayMessageIDPerTenant is issue 29's finding 6: two tenants hold an
// event with the same event ID (an archive imported under a new tenant ID
// kept its IDs). Both must reach the transport as two messages with
// message IDs of their own (on NATS the Nats-Msg-Id, JetStream's
// de-duplication key, which dropped the copy's messages silently), each
// still carrying the shared event ID in event_id, and a subscriber must
// turn both back into their records.
func TestRelayMessageIDPerTenant(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 2*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	admin := adminConn(ctx, t, d.AdminURL)
	shared := uuid.NewString()
	ev := func(tenant string) genEvent {
		return genEvent{Tenant: tenant, Stream: "order-o-1", Version: 1, Type: "order.created", SchemaVersion: 1,
			Data: []byte(`{"order_id":"o-1","customer_id":"c-1","currency":"EUR","at":"2026-03-01T08:00:00Z"}`)}
	}
	if err := seedIDs(ctx, admin, []genEvent{ev("acme"), ev("acme-copy")}, []string{shared, shared}); err != nil {
		t.Fatal(err)
	}
	for _, tr := range transports(t, d) {
		t.Run(tr.name, func(t *testing.T) {
			relayAll(ctx, t, d, tr, 2)

			// What the transport holds.
			ids := map[string]string{} // tenant -> message ID
			switch tr.name {
			case "nats":
				nc, err := nats.Connect(natsURL(t))
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				js, err := nc.JetStream()
				if err != nil {
					t.Fatal(err)
				}
				si, err := js.StreamInfo(tr.topic)
				if err != nil {
					t.Fatal(err)
				}
				if si.State.Msgs != 2 {
					t.Errorf("JetStream holds %d messages, want 2 (one per tenant; the same Nats-Msg-Id for both drops the second)", si.State.Msgs)
				}
				for seq := si.State.FirstSeq; seq <= si.State.LastSeq && seq > 0; seq++ {
					m, err := js.GetMsg(tr.topic, seq)
					if err != nil {
						t.Fatal(err)
					}
					if got := m.Header.Get(MetaEventID); got != shared {
						t.Errorf("message %d: event_id %q, want %q", seq, got, shared)
					}
					ids[m.Header.Get(MetaTenant)] = m.Header.Get(nats.MsgIdHdr)
				}
			case "sql":
				rows, err := admin.Query(ctx, `SELECT uuid, metadata->>'tenant', metadata->>'event_id' FROM strata.watermill_strata_events ORDER BY "offset"`)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id, tenant, eventID string
					if err := rows.Scan(&id, &tenant, &eventID); err != nil {
						t.Fatal(err)
					}
					if eventID != shared {
						t.Errorf("row of %s: event_id %q, want %q", tenant, eventID, shared)
					}
					ids[tenant] = id
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
			}
			if len(ids) != 2 || ids["acme"] == ids["acme-copy"] || ids["acme"] == shared || ids["acme-copy"] == shared {
				t.Errorf("message IDs by tenant %v: want one per tenant, each unlike the other and unlike the event ID %s", ids, shared)
			}
			for tenant, id := range ids {
				if want := MessageID(tenant, shared); id != want {
					t.Errorf("message ID of %s: %s, want MessageID = %s", tenant, id, want)
				}
			}

			// A subscriber receives both and turns them back into records.
			sub := tr.subscriber(t, "msgid_check")
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			msgs, err := sub.Subscribe(sctx, tr.topic)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for len(got) < 2 {
				select {
				case m := <-msgs:
					rec, err := RecordFromMessage(m)
					if err != nil {
						t.Fatalf("RecordFromMessage: %v", err)
					}
					got[rec.Tenant] = rec.ID
					m.Ack()
				case <-time.After(20 * time.Second):
					t.Fatalf("subscriber received %v, want both tenants' events", got)
				}
			}
			if got["acme"] != shared || got["acme-copy"] != shared {
				t.Errorf("records %v: want both with event ID %s", got, shared)
			}
			cancel()
			_ = sub.Close()
		})
	}
}
