package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The append workload's two further baselines, measured in the same run on
// the same database and settings (issue 18):
//
//   - a Go peer: watermill-sql's PostgreSQL publisher, one event per
//     publish (its transaction: insert with a transaction-id column for
//     safe tailing, the technique strata's log uses);
//   - the ceiling group commit aims at: raw single-statement INSERTs of 10
//     events per transaction into the table identical to strata.events,
//     at the same concurrency.

// batchSize is the events per transaction of the raw batched baseline.
const batchSize = 10

// watermillTopic is the watermill-sql topic the peer publishes to (its own
// table, watermill_bench_events).
const watermillTopic = "bench_events"

// watermillRuns measures watermill-sql publishing one event per publish.
func watermillRuns(ctx context.Context, e *Env, pool *pgxpool.Pool, writers, run int) (Run, error) {
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pool),
		wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true},
		watermill.NewSlogLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return Run{}, err
	}
	defer pub.Close()
	// Create the topic's table before measuring.
	if err := pub.Publish(watermillTopic, message.NewMessage(uuid.NewString(), []byte(benchPayload))); err != nil {
		return Run{}, fmt.Errorf("watermill-sql: %w", err)
	}
	r := closedLoop(ctx, writers, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
		m := message.NewMessage(uuid.NewString(), []byte(benchPayload))
		m.Metadata.Set("tenant", fmt.Sprintf("tenant-%d", rng.IntN(benchTenants)))
		m.Metadata.Set("command_id", benchMeta.CommandID)
		m.SetContext(ctx)
		return pub.Publish(watermillTopic, m)
	})
	e.logf("append wm-sql  writers=%-2d run %d: %.0f events/s p99 %.2f ms", writers, run+1, r.Throughput, r.P99ms)
	return r, nil
}

// batchedRuns measures raw INSERTs of batchSize events per transaction.
func batchedRuns(ctx context.Context, e *Env, raw *pgxpool.Pool, writers, run int) Run {
	parts := partition(writers)
	values := make([]string, batchSize)
	for i := range values {
		b := i * 6
		values[i] = fmt.Sprintf("($%d, $%d, $%d, $%d, 'order.line_added', 2, $%d, $%d)", b+1, b+2, b+3, b+4, b+5, b+6)
	}
	insert := `INSERT INTO public.raw_events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata) VALUES ` +
		strings.Join(values, ", ")
	r := closedLoop(ctx, writers, e.cfg.Warmup, e.cfg.Duration, func(ctx context.Context, w int, rng *rand.Rand) error {
		p := parts[w]
		args := make([]any, 0, 6*batchSize)
		picked := make([]int, batchSize)
		for i := range batchSize {
			k := rng.IntN(len(p.streams))
			picked[i] = k
			p.version[k]++ // distinct versions even when a stream comes up twice
			args = append(args, fmt.Sprintf("tenant-%d", p.streams[k]%benchTenants), fmt.Sprintf("order-batch-w%d-%d-%d", writers, run, p.streams[k]),
				p.version[k], uuid.NewString(), benchPayload, benchMetaJSON)
		}
		err := pgx.BeginFunc(ctx, raw, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, args...)
			return err
		})
		if err != nil {
			for _, k := range picked {
				p.version[k]--
			}
		}
		return err
	})
	// closedLoop counts transactions; the unit is events.
	r.Throughput *= batchSize
	r.Ops *= batchSize
	e.logf("append raw x%d writers=%-2d run %d: %.0f events/s p99 %.2f ms per transaction", batchSize, writers, run+1, r.Throughput, r.P99ms)
	return r
}
