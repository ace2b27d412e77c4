package harness

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestHSBrokerFindings: a message is the tenant's by its subject or its
// tenant header, and holds the marker wherever it is: payload, a header's
// value or the subject.
func TestHSBrokerFindings(t *testing.T) {
	msgs := []brokerMessage{
		{Subject: "top.hs-victim.order.created", Data: []byte(`{"customer_id":"x"}`)},
		{Subject: "top.other.order.created", Header: nats.Header{"tenant": {"hs-victim"}}},
		{Subject: "top.other.order.created", Data: []byte(`{"customer_id":"cnryv000001-c1"}`)},
		{Subject: "top.other.order.created", Header: nats.Header{"actor": {"cnryv000001"}}},
		{Subject: "top.other.cnryv000001", Data: []byte(`{}`)},
		{Subject: "top.hs-victim2.order.created", Data: []byte(`{}`)}, // another tenant whose ID starts alike
	}
	got := hsBrokerFindings(msgs, "top", "hs-victim", "cnryv000001")
	if got.tenant != 2 || got.marker != 3 {
		t.Errorf("found %+v, want 2 messages of the tenant and 3 with the marker", got)
	}
}

// TestHostileArchives: every attack is a gzip stream under a tenant ID of
// its own, with the marker inside (but the bomb's and the symlink's, whose
// marker is in an entry after the refused one, read uncompressed only in
// part here).
func TestHostileArchives(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range hostileArchives("hs-h", "cnryh000001") {
		if seen[a.tenant] || a.want == "" {
			t.Errorf("%s: tenant %q (seen before: %v), want %q", a.name, a.tenant, seen[a.tenant], a.want)
		}
		seen[a.tenant] = true
		zr, err := gzip.NewReader(bytes.NewReader(a.raw))
		if err != nil {
			t.Fatalf("%s: %v", a.name, err)
		}
		head, _ := io.ReadAll(io.LimitReader(zr, 8<<20))
		if !bytes.Contains(head, []byte("cnryh000001")) {
			t.Errorf("%s: the marker is not in its first 8 MiB", a.name)
		}
	}
	if len(seen) != 7 {
		t.Errorf("%d attacks, want 7", len(seen))
	}
}
