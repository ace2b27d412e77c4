package relay

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/internal/testdb"
)

// transport is one way of carrying the relay's messages in tests.
type transport struct {
	name  string
	topic string
	// publisher sets the relay's Publisher or TxPublisher.
	publisher func(t *testing.T, cfg *Config)
	// subscriber returns a subscriber for consumer.
	subscriber func(t *testing.T, consumer string) message.Subscriber
}

// transports returns NATS JetStream (a topic of the test's own) and
// watermill-sql (DefaultTopic, in the test's database).
func transports(t *testing.T, d *testdb.DB) []transport {
	url := natsURL(t)
	topic := newTopic(t, url)
	ncfg := NATSConfig{URL: url, AckWait: 3 * time.Second, NakDelay: 50 * time.Millisecond, Logger: quietLogger()}
	return []transport{
		{
			name:  "nats",
			topic: topic,
			publisher: func(t *testing.T, cfg *Config) {
				pub, err := NewNATSPublisher(ncfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = pub.Close() })
				cfg.Publisher = pub
			},
			subscriber: func(t *testing.T, consumer string) message.Subscriber {
				sub, err := NewNATSSubscriber(ncfg, consumer)
				if err != nil {
					t.Fatal(err)
				}
				return sub
			},
		},
		{
			name:  "sql",
			topic: DefaultTopic,
			publisher: func(t *testing.T, cfg *Config) {
				cfg.TxPublisher = SQLTxPublisher(quietLogger())
			},
			subscriber: func(t *testing.T, consumer string) message.Subscriber {
				sub, err := NewSQLSubscriber(d.Projector, consumer, SQLConfig{PollInterval: 20 * time.Millisecond, ResendInterval: 50 * time.Millisecond,
					AckDeadline: 5 * time.Second, Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				return sub
			},
		},
	}
}

// relayAll runs a relay in this process until it has published the n
// events of the log, then stops it. (Not "up to the log's head": Head only
// sees below the oldest transaction running anywhere in the cluster, which
// other tests share.)
func relayAll(ctx context.Context, t *testing.T, d *testdb.DB, tr transport, n int) {
	t.Helper()
	cfg := Config{Topic: tr.topic, PollInterval: 20 * time.Millisecond, Logger: quietLogger()}
	tr.publisher(t, &cfg)
	r, err := New(postgres.New(nil, d.Projector), d.Projector, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	waitFor(t, 30*time.Second, "the relay to publish the log", func() bool { return r.Status().Published >= int64(n) })
	cancel()
	<-done
}

// runConsumer runs c until the returned stop is called, which returns
// Run's error.
func runConsumer(ctx context.Context, t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	select {
	case <-c.Running():
	case err := <-done:
		t.Fatalf("consumer: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("consumer did not start")
	}
	return func() error {
		cancel()
		return <-done
	}
}
