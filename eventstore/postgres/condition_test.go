package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/internal/testdb"
)

func taggedEvent(typ string, tags ...string) []eventstore.NewEvent {
	e := oneEvent(typ)
	e[0].Metadata.Tags = tags
	return e
}

// TestTaggedReadWaitsForAnInFlightAppend forces the race a tagged read
// must not lose: an append of a matching event holds its transaction open
// (it has its xid, its event is not visible) while the read runs. Read
// without waiting, the event would sit before the position the read
// returns, and an append conditioned on that read would commit beside it.
// The read holds the tag's lock shared, so it waits, and sees it.
func TestTaggedReadWaitsForAnInFlightAppend(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	inside, release := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, _ *pgx.Conn) error {
		close(inside)
		<-release
		return nil
	}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{}), forced(1, nil, hold))
	q := event.Query{{Tags: []string{"email:a"}}}
	held := make(chan error, 1)
	go func() {
		_, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "c-1", Expected: eventstore.NoStream, Events: taggedEvent("customer.registered", "email:a")})
		held <- err
	}()
	<-inside
	type read struct {
		recs []event.Record
		at   event.Position
		err  error
	}
	done := make(chan read, 1)
	go func() {
		recs, at, err := s.ReadTagged(ctxT(t), "t-a", q)
		done <- read{recs, at, err}
	}()
	var r read
	select {
	case r = <-done:
		t.Errorf("the read returned while the matching append was in flight: %d events at %s, %v", len(r.recs), r.at, r.err)
		close(release)
	case <-time.After(300 * time.Millisecond):
		close(release)
		r = <-done
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	_, err := s.Append(ctxT(t), eventstore.AppendRequest{Tenant: "t-a", Stream: "c-2", Expected: eventstore.NoStream,
		Condition: &eventstore.AppendCondition{Query: q, After: r.at}, Events: taggedEvent("customer.registered", "email:a")})
	switch {
	case len(r.recs) == 0 && err == nil:
		t.Fatal("the read missed the in-flight event and an append conditioned on it committed: two events tagged email:a")
	case len(r.recs) != 1:
		t.Fatalf("the read returned %d events, want the one committed while it waited", len(r.recs))
	case err != nil:
		t.Fatalf("an append conditioned on a read that saw everything: %v", err)
	}
}

// TestConditionalAppendsInOneGroup: conditional appends on one tag carried
// by one group transaction go in successive statements, so each check sees
// the earlier ones' events: one wins, the others fail their condition, and
// a plain append in the same group commits.
func TestConditionalAppendsInOneGroup(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	spy := &groupSpy{}
	s := New(d.App, d.Projector, WithGroupCommit(GroupConfig{MaxBatch: 64}), forced(4, spy, nil))
	q := event.Query{{Tags: []string{"seat:12A"}}}
	_, at, err := s.ReadTagged(ctxT(t), "t-a", q)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := eventstore.AppendRequest{Tenant: "t-a", Stream: fmt.Sprintf("b-%d", i), Expected: eventstore.NoStream, Events: taggedEvent("seat.sold", "seat:12A"),
				Condition: &eventstore.AppendCondition{Query: q, After: at}}
			if i == 3 {
				req.Condition, req.Events = nil, oneEvent("booking.noted")
			}
			_, errs[i] = s.Append(ctxT(t), req)
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs[:3] {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, eventstore.ErrConditionFailed):
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if won != 1 || errs[3] != nil {
		t.Fatalf("%d conditional appends won (want 1); the plain one: %v", won, errs[3])
	}
	sizes, outcomes := spy.get()
	if !slices.Equal(sizes, []int{4}) || outcomes[0] != groupCommitted {
		t.Fatalf("groups %v (%v), want one of 4, committed", sizes, outcomes)
	}
	recs, _, err := s.ReadTagged(ctxT(t), "t-a", q)
	if err != nil || len(recs) != 1 {
		t.Fatalf("seat 12A sold %d times (%v)", len(recs), err)
	}
}
