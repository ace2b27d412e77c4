package relay

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"

	"github.com/strata-es/strata/internal/failpoint"
)

// The relay's poison rule (ARCHITECTURE decisions 5 and 17).
//
// A failure to publish is either the event's or the circumstances'. The
// event's (a message larger than the transport takes, one it rejects as
// invalid) cannot be cured by trying again: the relay parks the event's
// stream for its tenant in the dead-letter store, with every later event
// of that stream behind it, and goes on with every other stream and
// tenant. The circumstances' (the broker down or slow, a timeout, a full
// stream, anything unknown) would meet every event alike, so the relay
// retries the batch with backoff, never skipping and never parking: a
// broker outage must not park every stream. A panic in the publish path is
// the event's failure too, but possibly a passing one: it is retried
// PanicAttempts times before the stream is parked.

// ErrUndeliverable: the transport cannot take this one message, whatever
// the circumstances (TooLargeError, or a message it rejects as invalid).
var ErrUndeliverable = errors.New("message undeliverable")

// TooLargeError is a message above a transport's or the configured size
// limit.
type TooLargeError struct {
	Size, Max int64
	// Limit names the limit, e.g. "maximum payload of the NATS server
	// (max_payload)".
	Limit string
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("message of %d bytes exceeds the %s of %d bytes", e.Size, e.Limit, e.Max)
}

func (e *TooLargeError) Unwrap() error { return ErrUndeliverable }

// PanicError is a panic in a publisher, recovered.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("publisher panicked: %v", e.Value) }

// MessageChecker is a Publisher that can tell, before publishing, that a
// message is one its transport refuses (NATSPublisher: above the server's
// max_payload). Errors wrap ErrUndeliverable or ErrBadMessage.
type MessageChecker interface {
	CheckMessage(topic string, msg *message.Message) error
}

// failure is what a publish error means for the event.
type failure int8

const (
	failTransient failure = iota // retry the batch, park nothing
	failPermanent                // park the event's stream now
	failPanic                    // retry; park after PanicAttempts
)

// JetStream API error codes of a message the stream refuses for its own
// size: JSStreamMessageExceedsMaximumErr (the stream's max_msg_size) and
// JSStreamHeaderExceedsMaximumErr (headers above 64 KiB).
const (
	jsMessageTooLarge nats.ErrorCode = 10054
	jsHeaderTooLarge  nats.ErrorCode = 10097
)

// classify says whose failure err, the failure to publish one message (or
// a batch), is. Only failures known to belong to the message are
// permanent; anything unknown is transient.
func classify(err error) failure {
	var pe *PanicError
	var api *nats.APIError
	var pg *pgconn.PgError
	switch {
	case err == nil:
		return failTransient
	case errors.As(err, &pe):
		return failPanic
	case errors.Is(err, ErrUndeliverable),
		errors.Is(err, ErrBadMessage),
		errors.Is(err, nats.ErrMaxPayload),
		errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrBadHeaderMsg):
		return failPermanent
	case errors.As(err, &api):
		if api.ErrorCode == jsMessageTooLarge || api.ErrorCode == jsHeaderTooLarge {
			return failPermanent
		}
	case errors.As(err, &pg):
		// watermill-sql: a value PostgreSQL will not store (data exception,
		// a size limit of the server).
		if len(pg.Code) >= 2 && (pg.Code[:2] == "22" || pg.Code[:2] == "54") {
			return failPermanent
		}
	}
	return failTransient
}

// safePublish publishes msgs, turning a panic of the publisher into a
// PanicError.
func safePublish(p message.Publisher, topic string, msgs []*message.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	failpoint.Delay(FailpointPublishDelay)
	for _, m := range msgs {
		failpoint.PanicFor(FailpointPublishPanic, m.Metadata.Get(MetaTenant))
	}
	return p.Publish(topic, msgs...)
}

// FailpointPublishPanic is a panic point (internal/failpoint, keyed by the
// message's tenant): a transport that panics on one tenant's messages, for
// the fault harness. FailpointPublishDelay is a delay point: every publish
// waits that long first (a slow broker).
const (
	FailpointPublishPanic = "relay.publish-panic"
	FailpointPublishDelay = "relay.publish-delay"
)

// checkMessage applies the configured size limit (max > 0) and the
// publisher's own check, if it has one, to msg, recovering a panic.
func checkMessage(p any, topic string, msg *message.Message, max int64) (err error) {
	if max > 0 {
		if size := messageSize(msg); size > max {
			return &TooLargeError{Size: size, Max: max, Limit: "relay's configured maximum message size"}
		}
	}
	c, ok := p.(MessageChecker)
	if !ok {
		return nil
	}
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return c.CheckMessage(topic, msg)
}

// messageSize is what a message weighs whatever the transport: its payload
// and its metadata's keys and values.
func messageSize(msg *message.Message) int64 {
	n := len(msg.Payload) + len(msg.UUID)
	for k, v := range msg.Metadata {
		n += len(k) + len(v)
	}
	return int64(n)
}
