package relay

import (
	"fmt"
	"log/slog"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// watermill-sql layout.
//
// A topic is a table "watermill_<topic>" with its consumer groups' offsets
// in "watermill_offsets_<topic>", both created by a migration for
// DefaultTopic (owned by strata_owner; the projector role may insert and
// read messages and keep offsets), never by watermill at run time. The
// relay inserts each batch in the transaction that advances its
// checkpoint, so every event is published exactly once, in log order.
// Subscribers read rows below the oldest running transaction
// (transaction_id < pg_snapshot_xmin), ordered by (transaction_id,
// "offset"), so they never skip a row that commits late.

// sqlSchema is the messages table layout of the migration. The payload is
// JSON (not JSONB), which keeps the event's bytes exactly.
func sqlSchema(batch int) wsql.DefaultPostgreSQLSchema {
	return wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch, InitializeSchemaWithoutTransaction: true}
}

// SQLTxPublisher is Config.TxPublisher for watermill-sql on strata's
// PostgreSQL: it publishes into the relay's own transaction.
func SQLTxPublisher(logger *slog.Logger) func(tx pgx.Tx) (message.Publisher, error) {
	if logger == nil {
		logger = slog.Default()
	}
	wl := watermillLogger(logger)
	return func(tx pgx.Tx) (message.Publisher, error) {
		// Never call Commit or Rollback on the wrapper TxFromPgx returns (its
		// context is nil); the relay ends the pgx.Tx itself.
		pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: sqlSchema(0)}, wl)
		if err != nil {
			return nil, fmt.Errorf("sql publisher: %w", err)
		}
		return pub, nil
	}
}

// SQLConfig configures a watermill-sql subscriber.
type SQLConfig struct {
	// BatchSize is how many messages one poll reads and handles in one
	// subscriber transaction (default 50). That transaction holds a row lock
	// and so a transaction ID while its batch is handled, which holds back
	// every global-log reader of the cluster meanwhile: keep it small.
	BatchSize int
	// PollInterval is how often an idle subscriber polls (default 250ms).
	PollInterval time.Duration
	// ResendInterval is the pause before a nacked message is handed out
	// again (default 1s).
	ResendInterval time.Duration
	// AckDeadline bounds a message's handling, retries included (default 30s).
	AckDeadline time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NewSQLSubscriber returns a watermill-sql subscriber for one consumer (its
// consumer group) on the projector pool. Messages of one consumer group
// are handed out one at a time in (transaction_id, "offset") order; a
// nacked message is handed out again before any later one.
func NewSQLSubscriber(pool *pgxpool.Pool, consumer string, cfg SQLConfig) (message.Subscriber, error) {
	if !consumerPattern.MatchString(consumer) {
		return nil, fmt.Errorf("sql subscriber: consumer %q: want [a-z][a-z0-9_]{0,62}", consumer)
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 50
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	if cfg.ResendInterval == 0 {
		cfg.ResendInterval = time.Second
	}
	if cfg.AckDeadline == 0 {
		cfg.AckDeadline = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	deadline := cfg.AckDeadline
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
		ConsumerGroup:  consumer,
		AckDeadline:    &deadline,
		PollInterval:   cfg.PollInterval,
		ResendInterval: cfg.ResendInterval,
		RetryInterval:  time.Second,
		SchemaAdapter:  sqlSchema(cfg.BatchSize),
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
	}, watermillLogger(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("sql subscriber: %w", err)
	}
	return sub, nil
}
