package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/storetest"
	"github.com/strata-es/strata/internal/testdb"
)

// TestReadTenantIsTheLogFilteredByTenant: ReadTenant pages through one
// tenant's events and returns exactly what the global log holds of that
// tenant, in the same order; an open append of another tenant holds it at
// the same horizon as ReadAll (a later commit of the tenant is not shown
// past it), and once the open one commits the rest follows.
func TestReadTenantIsTheLogFilteredByTenant(t *testing.T) {
	d := testdb.NewPrivate(t, nil).DB // the held transaction pauses every reader of its cluster
	s := New(d.App, d.Projector)
	ctx := context.Background()
	appendOne := func(tenant string, i int) {
		t.Helper()
		_, err := s.Append(ctx, eventstore.AppendRequest{Tenant: tenant, Stream: fmt.Sprintf("s-%d", i%5), Expected: eventstore.Any,
			Events: []eventstore.NewEvent{{ID: storetest.NewID(), Type: "x.y", SchemaVersion: 1, Data: []byte(`{}`)}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 60 {
		appendOne([]string{"t-a", "t-b", "t-c"}[i%3], i)
	}
	readTenant := func(tenant string, page int) []event.Record {
		t.Helper()
		var out []event.Record
		var after event.Position
		for {
			recs, err := s.ReadTenant(ctx, tenant, after, page)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				return out
			}
			out = append(out, recs...)
			after = recs[len(recs)-1].Position
		}
	}
	all, err := s.ReadAll(ctx, event.Position{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range all {
		if r.Tenant == "t-b" {
			want = append(want, r.ID)
		}
	}
	got := readTenant("t-b", 3)
	if len(got) != len(want) {
		t.Fatalf("ReadTenant(t-b) returned %d events, the log holds %d of t-b", len(got), len(want))
	}
	for i, r := range got {
		if r.Tenant != "t-b" || r.ID != want[i] {
			t.Fatalf("event %d: %s/%s, want t-b/%s (the log's order)", i, r.Tenant, r.ID, want[i])
		}
	}

	commit, _ := holdAppend(t, d, "t-c", "held")
	appendOne("t-b", 100) // commits after the held transaction began
	if n := len(readTenant("t-b", 50)); n != len(want) {
		t.Fatalf("with an older transaction of t-c open, ReadTenant(t-b) shows %d events, want the %d before it", n, len(want))
	}
	commit()
	if n := len(readTenant("t-b", 50)); n != len(want)+1 {
		t.Fatalf("after the held transaction committed, ReadTenant(t-b) shows %d events, want %d", n, len(want)+1)
	}
}
