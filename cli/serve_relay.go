package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/relay"
	"github.com/strata-es/strata/tenancy/subjects"
)

// Relay modes (STRATA_RELAY).
const (
	relayOff  = "off"
	relaySQL  = "sql"
	relayNATS = "nats"
)

// relaySettings reads STRATA_RELAY, STRATA_RELAY_URL and
// STRATA_RELAY_TOPIC. The relay is off unless asked for: a NATS URL turns
// it on (JetStream), STRATA_RELAY=sql publishes into watermill-sql's table
// on strata's own PostgreSQL instead. Off by default because a relay with
// nobody consuming only grows a table or a stream.
func relaySettings(e env) (mode, natsURL, topic string, err error) {
	natsURL = e.str("STRATA_RELAY_URL", "")
	def := relayOff
	if natsURL != "" {
		def = relayNATS
	}
	mode = strings.ToLower(e.str("STRATA_RELAY", def))
	topic = e.str("STRATA_RELAY_TOPIC", relay.DefaultTopic)
	switch mode {
	case relayOff:
	case relayNATS:
		if natsURL == "" {
			return "", "", "", errors.New("STRATA_RELAY=nats needs STRATA_RELAY_URL=nats://host:4222")
		}
		if u, perr := url.Parse(natsURL); perr != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
			return "", "", "", errors.New("STRATA_RELAY_URL: want nats://host:port (NATS JetStream)")
		}
	case relaySQL:
		if natsURL != "" {
			return "", "", "", errors.New("STRATA_RELAY=sql publishes into PostgreSQL: unset STRATA_RELAY_URL")
		}
		if topic != relay.DefaultTopic {
			return "", "", "", fmt.Errorf("STRATA_RELAY_TOPIC: the sql relay publishes to %s only (its tables come from a migration)", relay.DefaultTopic)
		}
	default:
		return "", "", "", fmt.Errorf("STRATA_RELAY=%q: want off, sql or nats", mode)
	}
	return mode, natsURL, topic, nil
}

// redactURL hides a password in a NATS URL for logging.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

// wireRelay runs the relay in the projector role when it is on: committed
// events published in log order to NATS JetStream or watermill-sql,
// checkpointed in projection_checkpoints as relay_<topic>. Every projector
// process runs one; a lease keeps one active, the others stand by.
func wireRelay(a *app) error {
	mode, natsURL, topic, err := relaySettings(a.env)
	if err != nil || mode == relayOff {
		return err
	}
	maxBytes, err := relayMaxMessageBytes(a.env)
	if err != nil {
		return err
	}
	wake := projections.NewSignal()
	cfg := relay.Config{Topic: topic, MaxMessageBytes: maxBytes, Wake: wake.C, Logger: a.logger}
	closePub := func() {}
	switch mode {
	case relayNATS:
		pub, err := relay.NewNATSPublisher(relay.NATSConfig{URL: natsURL, Name: "strata-relay", Logger: a.logger})
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		cfg.Publisher = pub
		closePub = func() { _ = pub.Close() }
	case relaySQL:
		cfg.TxPublisher = relay.SQLTxPublisher(a.logger)
	}
	r, err := relay.New(a.log, a.projPool, cfg)
	if err != nil {
		closePub()
		return err
	}
	a.workers = append(a.workers,
		worker{name: "relay wake-up", run: func(ctx context.Context) error {
			projections.Forward(ctx, a.appended.C, wake)
			return nil
		}},
		worker{name: "relay listener", run: func(ctx context.Context) error {
			return projections.Listen(ctx, a.projPool, wake, a.logger)
		}},
		worker{name: "relay", run: func(ctx context.Context) error {
			defer closePub()
			return r.Run(ctx)
		}},
	)
	// Ready once the relay has a session: active (publishing, or retrying a
	// broker that does not answer), or standby.
	a.readiness = append(a.readiness, readinessCheck{"relay", func(context.Context) error {
		if s := r.Status().State; s == projections.StateStarting || s == projections.StateStopped {
			return fmt.Errorf("relay %s", s)
		}
		return nil
	}})
	where := "watermill_" + topic + " (PostgreSQL)"
	if mode == relayNATS {
		where = "JetStream stream " + topic + " at " + redactURL(natsURL)
	}
	a.logger.Info("relay on", "transport", mode, "topic", topic, "to", where, "checkpoint", r.Name())
	return nil
}

// relayMaxMessageBytes reads STRATA_RELAY_MAX_MESSAGE_BYTES (0, the
// default: the transport's own limit only).
func relayMaxMessageBytes(e env) (int64, error) {
	v := e.str("STRATA_RELAY_MAX_MESSAGE_BYTES", "")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("STRATA_RELAY_MAX_MESSAGE_BYTES=%q: want a number of bytes (0: the transport's limit)", v)
	}
	return n, nil
}

// relayRepublishers returns what retries the relay's dead letters
// (replay.Config.Relays) when the relay is on, from the same settings as
// the relay, and what closes it: on NATS its own connection, opened at the
// first retry of a relay letter, never before.
func relayRepublishers(e env, logger *slog.Logger) ([]projections.Projection, func(), error) {
	mode, natsURL, topic, err := relaySettings(e)
	if err != nil || mode == relayOff {
		return nil, func() {}, err
	}
	maxBytes, err := relayMaxMessageBytes(e)
	if err != nil {
		return nil, nil, err
	}
	cfg := relay.RepublishConfig{Topic: topic, MaxMessageBytes: maxBytes, SQL: mode == relaySQL}
	if mode == relayNATS {
		cfg.Publisher = func() (message.Publisher, error) {
			return relay.NewNATSPublisher(relay.NATSConfig{URL: natsURL, Name: "strata-relay-retry", Logger: logger})
		}
	}
	rp, err := relay.NewRepublisher(cfg)
	if err != nil {
		return nil, nil, err
	}
	return []projections.Projection{rp}, func() { _ = rp.Close() }, nil
}

// erasureNotices returns subjects.Config.Announce for the relay's
// settings: a subject's erasure tells the broker's consumers where the
// relay publishes the tenant's events (relay.Notices), or nil when the
// relay is off. A JetStream connection is opened for each notice: erasures
// are rare, and a serving process keeps no connection for them.
func erasureNotices(e env, logger *slog.Logger) (func(ctx context.Context, tx pgx.Tx, n subjects.Notice) (string, error), error) {
	mode, natsURL, topic, err := relaySettings(e)
	if err != nil || mode == relayOff {
		return nil, err
	}
	return func(ctx context.Context, tx pgx.Tx, n subjects.Notice) (string, error) {
		notices := relay.Notices{Topic: topic}
		if mode == relaySQL {
			notices.TxPublisher = relay.SQLTxPublisher(logger)
		} else {
			pub, err := relay.NewNATSPublisher(relay.NATSConfig{URL: natsURL, Name: "strata-erasure-notice", Logger: logger})
			if err != nil {
				return "", fmt.Errorf("erasure notice: %w", err)
			}
			defer pub.Close()
			notices.Publisher = pub
		}
		return notices.Publish(ctx, tx, n.Tenant, relay.Erased{ErasureID: n.ErasureID, KeyID: n.KeyID, Pseudonym: n.Pseudonym, At: n.At})
	}, nil
}

// brokerReader returns subjects.Config.Broker for the relay's settings:
// `strata subjects verify` reads the tenant's messages where the relay
// publishes them (JetStream, or watermill-sql's table through owner as the
// projector); nil when the relay is off.
func brokerReader(e env, owner *pgxpool.Pool, logger *slog.Logger) (func(ctx context.Context, tenant string, fn func(relay.Held) error) error, error) {
	mode, natsURL, topic, err := relaySettings(e)
	if err != nil || mode == relayOff {
		return nil, err
	}
	if mode == relayNATS {
		return func(ctx context.Context, tenant string, fn func(relay.Held) error) error {
			return relay.ReadNATS(ctx, relay.NATSConfig{URL: natsURL, Name: "strata-subjects-verify", Logger: logger}, topic, tenant, fn)
		}, nil
	}
	return func(ctx context.Context, tenant string, fn func(relay.Held) error) error {
		return pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleProjector); err != nil {
				return fmt.Errorf("read the relay's table as %s: %w", db.RoleProjector, err)
			}
			return relay.ReadSQL(ctx, tx, topic, tenant, fn)
		})
	}, nil
}
