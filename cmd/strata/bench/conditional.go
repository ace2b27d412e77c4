package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
)

// benchConditional (issue 31) measures what an append condition (a
// dynamic consistency boundary) costs a command: the personal workload's
// plain order.created appends, each carrying a tag and conditioned on no
// event with that tag, against the same appends with neither tag nor
// condition, in the same run, on the same pool and group commit.
//
// The tag is the order's stream ("key:order-…"), unique to the operation:
// nothing conflicts, and what is measured is the mechanism (the tag's
// lock, the condition's check, the tag's index entry, and the read where
// there is one), not retries. Two variants, the two ways a guarded
// command appends (commands.Guarded):
//
//   - first attempt: a command whose guard admits an empty history reads
//     nothing and conditions its append on no matching event at all (the
//     condition's position is the log's start);
//   - after its read: ReadTagged of the query, then the append on the
//     condition that nothing matching was appended after the read's
//     position (a guard that must see what matches, or a retry).
//
// The read costs a round trip the plain append does not make, and it
// staggers the writers, so that fewer appends find each other in a group.
// A third baseline separates that from the condition's own cost: the
// plain append after a read of its stream, as a command that loads its
// aggregate makes it.
func benchConditional(ctx context.Context, e *Env) ([]Result, error) {
	reg := order.NewRegistry()
	runs, err := compareCreates(ctx, e, "bench_conditional", func(_ context.Context, _ *pgxpool.Pool, store *postgres.Store) ([]createVariant, error) {
		return []createVariant{
			{name: "conditional plain      ", reg: reg},
			{name: "plain after stream read", reg: reg, guard: func(ctx context.Context, req *eventstore.AppendRequest) error {
				_, err := store.ReadStream(ctx, req.Tenant, req.Stream, 0)
				return err
			}},
			{name: "conditional read+append", reg: reg, guard: readAndCondition(store)},
			{name: "conditional first try  ", reg: reg, guard: func(_ context.Context, req *eventstore.AppendRequest) error {
				condition(req, event.Position{})
				return nil
			}},
		}, nil
	})
	if err != nil {
		return nil, err
	}
	const plainLabel = "the same order.created appends, grouped, without tag or condition"
	const target = ">= 0.8x plain grouped append"
	var results []Result
	for _, r := range runs {
		p, pr, full, first := r.summaries[0], r.summaries[1], r.summaries[2], r.summaries[3]
		results = append(results,
			Result{Workload: "conditional append, first attempt", Concurrency: r.writers, Unit: "events/s", Strata: first, Raw: &p,
				RawLabel: plainLabel, Ratio: ratioOf(first, p), Target: target, Met: met(ratioOf(first, p) >= 0.8),
				Note: "no read: the guard admits an empty history, so the condition is \"nothing matching at all\" (a claim of a free address)"},
			Result{Workload: "conditional append after its read", Concurrency: r.writers, Unit: "events/s", Strata: full, Raw: &p,
				RawLabel: plainLabel, Ratio: ratioOf(full, p), Target: target, Met: met(ratioOf(full, p) >= 0.8),
				Note: "ReadTagged, then the append conditioned on its position: one round trip more than the plain append"},
			Result{Workload: "conditional append after its read", Concurrency: r.writers, Unit: "events/s", Strata: full, Raw: &pr,
				RawLabel: "the same appends, each after a read of its stream (a command that loads its aggregate)", Ratio: ratioOf(full, pr), Target: ">= 0.8x plain append after a read", Met: met(ratioOf(full, pr) >= 0.8),
				Note: "the same round trips: what the condition itself costs a command that reads"})
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
