package commands_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/customers/customer"
	"github.com/strata-es/strata/examples/customers/customercmd"
	"github.com/strata-es/strata/internal/testdb"
)

// countingTags counts the tagged reads made through it.
type countingTags struct {
	*postgres.Store
	reads atomic.Int64
}

func (c *countingTags) ReadTagged(ctx context.Context, tenant string, q event.Query) ([]event.Record, event.Position, error) {
	c.reads.Add(1)
	return c.Store.ReadTagged(ctx, tenant, q)
}

// TestGuardedCommandsReadOnlyWhatTheirGuardMatches: a guarded command
// whose guard admits an empty history appends on its first attempt
// without reading (the condition "nothing matches the guard at all"), and
// reads and decides again only when something does match: a taken
// address is refused, an address its holder gave up is granted, and
// nothing is decided on a read the condition did not cover.
func TestGuardedCommandsReadOnlyWhatTheirGuardMatches(t *testing.T) {
	d := testdb.New(t)
	store := &countingTags{Store: postgres.New(d.App, d.Projector, postgres.WithGroupCommit(postgres.GroupConfig{}))}
	h, err := commands.NewHandler(customercmd.Aggregate, store, store, commands.Config{Registry: event.NewRegistry(customer.Codecs()...)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := domain.NewContext(context.Background(), "t-a")
	steps := []struct {
		what  string
		cmd   commands.Command[*customer.Customer]
		err   error
		reads int64 // tagged reads so far
	}{
		{"a free address: one append, no read", customercmd.Register{Customer: "c1", FullName: "Ann", Email: "ann@example.com"}, nil, 0},
		{"a taken address: the blind condition fails, the read refuses", customercmd.Register{Customer: "c2", FullName: "Bob", Email: "ann@example.com"}, customer.ErrEmailTaken, 1},
		{"a second free address", customercmd.ChangeEmail{Customer: "c1", Email: "ann@example.org"}, nil, 1},
		{"an address its holder gave up: read, then granted", customercmd.Register{Customer: "c2", FullName: "Bob", Email: "ann@example.com"}, nil, 2},
		{"and taken again", customercmd.Register{Customer: "c3", FullName: "Cid", Email: "ann@example.com"}, customer.ErrEmailTaken, 3},
	}
	for _, s := range steps {
		_, err := h.Handle(ctx, s.cmd, commands.Options{})
		if !errors.Is(err, s.err) || (s.err == nil) != (err == nil) {
			t.Fatalf("%s: got %v, want %v", s.what, err, s.err)
		}
		if got := store.reads.Load(); got != s.reads {
			t.Fatalf("%s: %d tagged reads so far, want %d", s.what, got, s.reads)
		}
	}
	holders := map[string]string{}
	for _, id := range []string{"c1", "c2", "c3"} {
		recs, err := store.ReadStream(ctx, "t-a", customer.StreamID(id), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			holders[id] += r.Type + " "
		}
	}
	if holders["c3"] != "" || holders["c1"] == "" || holders["c2"] == "" {
		t.Fatalf("streams after the steps: %v", holders)
	}
}
