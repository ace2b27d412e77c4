package relay

import (
	"errors"
	"fmt"
	"sync"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/projections"
)

// RepublishConfig configures a Republisher. Set exactly one of Publisher
// and SQL, as the relay whose letters it retries publishes.
type RepublishConfig struct {
	// Topic is the relay's topic (default DefaultTopic).
	Topic string
	// Publisher returns the broker publisher, e.g. a NATSPublisher to the
	// relay's server. It is called on the first retry, not before: a tool
	// that never retries a relay's letter never connects to the broker.
	Publisher func() (message.Publisher, error)
	// SQL publishes into watermill-sql's table on strata's PostgreSQL, in
	// the retry's own transaction (exactly once).
	SQL bool
	// MaxMessageBytes is the relay's Config.MaxMessageBytes.
	MaxMessageBytes int64
}

// Republisher is the relay as the dead-letter tooling sees it
// (replay.Config.Relays): a projections.Projection named after the relay's
// checkpoint, whose Apply publishes one parked event again, so that
// `strata replay dlq retry` re-publishes a parked stream's letters in
// version order and unparks it (projections.RetryStream), holding the
// relay's pause lock so the relay publishes nothing meanwhile. A letter
// that still cannot be published stays its stream's head with one more
// attempt, and the report says why.
//
// On a broker the message is published when Apply is called, before the
// retry's transaction commits: if that commit fails, the letters stay
// parked and were published, and the next retry publishes them again
// (JetStream drops them by their Nats-Msg-Id within its duplicate window,
// consumers deduplicate beyond it). With watermill-sql the message is
// inserted by the retry's transaction itself.
type Republisher struct {
	cfg  RepublishConfig
	name string

	mu  sync.Mutex
	pub message.Publisher // on a broker, once connected
}

var _ projections.Undecoded = (*Republisher)(nil)

// NewRepublisher returns the Republisher of the relay of cfg.Topic.
func NewRepublisher(cfg RepublishConfig) (*Republisher, error) {
	if cfg.Topic == "" {
		cfg.Topic = DefaultTopic
	}
	var errs []error
	if !topicPattern.MatchString(cfg.Topic) {
		errs = append(errs, fmt.Errorf("topic %q: want [a-z][a-z0-9_]{0,55}", cfg.Topic))
	}
	if (cfg.Publisher == nil) == !cfg.SQL {
		errs = append(errs, errors.New("set exactly one of Publisher and SQL"))
	}
	if cfg.MaxMessageBytes < 0 {
		errs = append(errs, fmt.Errorf("max message bytes %d: want 0 or more", cfg.MaxMessageBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("relay republisher: %w", err)
	}
	return &Republisher{cfg: cfg, name: CheckpointName(cfg.Topic)}, nil
}

// Name is the relay's checkpoint name, under which its letters are kept.
func (p *Republisher) Name() string { return p.name }

// EventTypes is empty: the relay publishes events of every type, and a
// retry hands every letter to Apply whatever its type.
func (p *Republisher) EventTypes() []string { return nil }

// Tables is empty: the relay writes no read model.
func (p *Republisher) Tables() []string { return nil }

// AppliesUndecoded implements projections.Undecoded: the relay publishes
// an event's JSON as stored and never decodes it, so a retry must not
// depend on a codec either.
func (p *Republisher) AppliesUndecoded() {}

// Apply publishes ev again, as the relay would have: the same message
// (MessageID, metadata, payload as stored), the same size limits, a panic
// recovered. On watermill-sql it queues the message's insert into b, the
// retry's transaction.
func (p *Republisher) Apply(b *pgx.Batch, ev projections.Event) error {
	msg := NewMessage(ev.Record)
	if p.cfg.SQL {
		if err := checkMessage(nil, p.cfg.Topic, msg, p.cfg.MaxMessageBytes); err != nil {
			return err
		}
		q, err := sqlSchema(0).InsertQuery(wsql.InsertQueryParams{Topic: p.cfg.Topic, Msgs: message.Messages{msg}})
		if err != nil {
			return fmt.Errorf("republish %s/%s v%d: %w", ev.Tenant, ev.Stream, ev.Version, err)
		}
		b.Queue(q.Query, q.Args...)
		return nil
	}
	pub, err := p.publisher()
	if err != nil {
		return err
	}
	if err := checkMessage(pub, p.cfg.Topic, msg, p.cfg.MaxMessageBytes); err != nil {
		return err
	}
	if err := safePublish(pub, p.cfg.Topic, []*message.Message{msg}); err != nil {
		return fmt.Errorf("republish %s/%s v%d: %w", ev.Tenant, ev.Stream, ev.Version, err)
	}
	return nil
}

func (p *Republisher) publisher() (message.Publisher, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pub != nil {
		return p.pub, nil
	}
	pub, err := p.cfg.Publisher()
	if err != nil {
		return nil, fmt.Errorf("relay republisher: %w", err)
	}
	p.pub = pub
	return pub, nil
}

// Close closes the broker publisher if a retry opened one.
func (p *Republisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pub == nil {
		return nil
	}
	err := p.pub.Close()
	p.pub = nil
	return err
}
