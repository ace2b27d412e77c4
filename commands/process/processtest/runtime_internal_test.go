package processtest

import (
	"testing"

	"github.com/strata-es/strata/domain/event"
)

// Settle compares the runner's checkpoint with the newest committed event
// by number: a head read that sorted transaction IDs as text put xid 998
// after 1010, so Settle returned while the runner had not decided the
// newer event (the flake that showed it: fulfilment's drive tests, once
// the cluster's xids passed 1000).
func TestCommittedHeadOrdersByNumber(t *testing.T) {
	t.Parallel()
	rt := NewRuntime(t, RuntimeConfig{Registry: event.NewRegistry()})
	for i, tx := range []string{"998", "1010"} {
		if _, err := rt.admin.Exec(rt.ctx, `INSERT INTO events (tx_id, tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ($1::text::xid8, 't-a', 's-1', $2, gen_random_uuid(), 'test.x', 1, '{}', '{}')`, tx, i+1); err != nil {
			t.Fatal(err)
		}
	}
	head, err := rt.committedHead()
	if err != nil {
		t.Fatal(err)
	}
	if head.Major != 1010 || head.Minor != 2 {
		t.Errorf("head %s, want 1010/2", head)
	}
}
