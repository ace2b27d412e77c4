package bench

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
)

// benchConditional (issue 31) measures what an append condition (a
// dynamic consistency boundary) costs a command: the personal workload's
// plain order.created appends, each inside the whole cycle a command does,
// ReadTagged of a query naming one tag, then the append of the event
// carrying that tag on the condition that nothing matching was appended
// after the read's position, against the same appends with neither tag
// nor condition, in the same run, on the same pool and group commit.
//
// The tag is the order's stream ("key:order-…"), unique to the operation:
// nothing conflicts, and what is measured is the mechanism (the tag's
// lock, the tagged read, the condition's check, the tag's index entry),
// not retries.
//
// A second row measures the conditional append without its read, which
// separates the read's cost from the check's. Its condition names the
// position of the latest append of the tenant, not a position read once
// before the run: the check scans the tenant's log after the position,
// and a position that ages through the run would make it scan more and
// more of it, which a command that has just read does not.
func benchConditional(ctx context.Context, e *Env) ([]Result, error) {
	reg := order.NewRegistry()
	runs, err := compareCreates(ctx, e, "bench_conditional", func(_ context.Context, _ *pgxpool.Pool, store *postgres.Store) ([]createVariant, error) {
		latest := &latestPositions{Store: store, at: map[string]event.Position{}}
		return []createVariant{
			{name: "conditional plain      ", reg: reg},
			{name: "conditional read+append", reg: reg, guard: readAndCondition(store)},
			{name: "conditional append only", reg: reg, store: latest, guard: func(_ context.Context, req *eventstore.AppendRequest) error {
				condition(req, latest.of(req.Tenant))
				return nil
			}},
		}, nil
	})
	if err != nil {
		return nil, err
	}
	const plainLabel = "the same order.created appends, grouped, without tag or condition"
	var results []Result
	for _, r := range runs {
		p, full, alone := r.summaries[0], r.summaries[1], r.summaries[2]
		results = append(results,
			Result{Workload: "conditional append with its read", Concurrency: r.writers, Unit: "events/s", Strata: full, Raw: &p,
				RawLabel: plainLabel, Ratio: ratioOf(full, p), Target: ">= 0.8x plain grouped append", Met: met(ratioOf(full, p) >= 0.8)},
			Result{Workload: "conditional append alone", Concurrency: r.writers, Unit: "events/s", Strata: alone, Raw: &p,
				RawLabel: plainLabel, Ratio: ratioOf(alone, p),
				Note: "no read: the condition names the position of the tenant's latest append (the check's cost without the read's)"})
	}
	return results, nil
}

// condition tags the request's event with the tag unique to its stream and
// conditions the append on no event so tagged after pos.
func condition(req *eventstore.AppendRequest, pos event.Position) {
	tags := []string{"key:" + req.Stream}
	req.Events[0].Metadata.Tags = tags
	req.Condition = &eventstore.AppendCondition{Query: event.Query{{Tags: tags}}, After: pos}
}

// readAndCondition is a command's cycle around its append: read the events
// carrying the request's tag (none: the tag is new) and condition the
// append on the read's position.
func readAndCondition(store *postgres.Store) func(ctx context.Context, req *eventstore.AppendRequest) error {
	return func(ctx context.Context, req *eventstore.AppendRequest) error {
		tag := "key:" + req.Stream
		recs, pos, err := store.ReadTagged(ctx, req.Tenant, event.Query{{Tags: []string{tag}}})
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			return fmt.Errorf("tag %s: %d events already carry it", tag, len(recs))
		}
		condition(req, pos)
		return nil
	}
}

// latestPositions appends through Store and remembers the position of
// each tenant's latest append.
type latestPositions struct {
	*postgres.Store
	mu sync.Mutex
	at map[string]event.Position
}

func (l *latestPositions) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	res, err := l.Store.Append(ctx, req)
	if err == nil {
		l.mu.Lock()
		l.at[req.Tenant] = res.Position
		l.mu.Unlock()
	}
	return res, err
}

// of returns the position of the tenant's latest append (zero before the
// first: the beginning of the log).
func (l *latestPositions) of(tenant string) event.Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[tenant]
}
