package eventstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/strata-es/strata/domain/event"
)

// Errors returned by every adapter. Adapters translate vendor errors into
// these and never leak driver types or database text.
var (
	// ErrVersionConflict: the stream is not at the expected version.
	ErrVersionConflict = errors.New("version conflict")
	// ErrIdempotencyKeyExists: the idempotency key of the append was already
	// recorded (by a concurrent or earlier execution). Nothing was appended;
	// the caller should look the stored outcome up.
	ErrIdempotencyKeyExists = errors.New("idempotency key already recorded")
	// ErrNoTenant: the call carried no tenant. Stores fail closed.
	ErrNoTenant = errors.New("no tenant")
	// ErrUnavailable: the backing database cannot be reached right now; the
	// operation may be retried later.
	ErrUnavailable = errors.New("event store unavailable")
	// ErrWritesFrozen: the tenant is moving to another placement and this
	// database refuses its writes for the final catch-up; nothing was
	// written. It is an ErrUnavailable: retry in a moment (the retry
	// reaches the tenant's new placement).
	ErrWritesFrozen = fmt.Errorf("%w: the tenant is moving to another placement", ErrUnavailable)
)

// ExpectedVersion states what the appender believes the stream's current
// version is. Values >= 0 are exact (0 = the stream has no events); the
// negative constants are the special cases.
type ExpectedVersion int64

const (
	// Any appends whatever the stream's version.
	Any ExpectedVersion = -1
	// NoStream requires that the stream has no events.
	NoStream ExpectedVersion = -2
	// StreamExists requires that the stream has at least one event.
	StreamExists ExpectedVersion = -3
)

// Exact expects the stream to be at version v (0 = empty).
func Exact(v int64) ExpectedVersion { return ExpectedVersion(v) }

func (e ExpectedVersion) String() string {
	switch e {
	case Any:
		return "any"
	case NoStream:
		return "no-stream"
	case StreamExists:
		return "stream-exists"
	}
	return fmt.Sprintf("%d", int64(e))
}

// Valid reports whether e is one of the special values or >= 0.
func (e ExpectedVersion) Valid() bool { return e >= StreamExists }

// Satisfied reports whether a stream at current version satisfies e.
func (e ExpectedVersion) Satisfied(current int64) bool {
	switch e {
	case Any:
		return true
	case NoStream:
		return current == 0
	case StreamExists:
		return current > 0
	}
	return int64(e) == current
}

// NewEvent is an event to append.
type NewEvent struct {
	// ID is a UUID (text form) chosen by the caller, stable across retries
	// of the same command.
	ID            string
	Type          string
	SchemaVersion int
	Data          []byte // JSON
	Metadata      event.Metadata
}

// Idempotency asks the store to record the outcome of a command under a key
// in the same transaction that appends its events (ARCHITECTURE decision 4).
type Idempotency struct {
	Key         string
	RequestHash string
	// Response builds the bytes stored as the outcome; it is called once the
	// append's result is known, inside the append transaction.
	Response func(AppendResult) ([]byte, error)
}

// AppendRequest appends Events to one stream atomically.
type AppendRequest struct {
	Tenant      string
	Stream      string
	Expected    ExpectedVersion
	Events      []NewEvent
	Idempotency *Idempotency // optional
	// Condition, optional, fails the append (ErrConditionFailed) when an
	// event matching its query was appended after its position
	// (condition.go; only a TagReader store accepts one).
	Condition *AppendCondition
}

// AppendResult describes a successful append.
type AppendResult struct {
	// FirstVersion and LastVersion are the versions given to the first and
	// last appended events; LastVersion is the stream's new version.
	FirstVersion int64
	LastVersion  int64
	// Position is the global position of the last appended event; its Token
	// is the consistency token returned to clients.
	Position event.Position
}

// Store is the tenant-scoped side of the port, used by command handling.
type Store interface {
	// Append appends req.Events to req.Stream of req.Tenant atomically if
	// the stream satisfies req.Expected. Errors: ErrVersionConflict,
	// ErrIdempotencyKeyExists, ErrNoTenant, ErrUnavailable.
	Append(ctx context.Context, req AppendRequest) (AppendResult, error)
	// ReadStream returns the stream's events with version > after, in
	// version order. A missing stream (or another tenant's) yields no
	// events and no error.
	ReadStream(ctx context.Context, tenant, stream string, after int64) ([]event.Record, error)
}

// Log is the global, cross-tenant side of the port, used by projections.
type Log interface {
	// ReadAll returns up to limit events after the given position in log
	// order. It never skips: an event not returned now (because its
	// transaction is still in flight) is never positioned at or before
	// the last returned one.
	ReadAll(ctx context.Context, after event.Position, limit int) ([]event.Record, error)
	// Head returns the position of the newest event a reader may see now
	// (zero for an empty log).
	Head(ctx context.Context) (event.Position, error)
}

// TenantLog is implemented by logs that can read one tenant's events in
// log order without reading the others' (PostgreSQL, through an index of
// the log by tenant). Tenant-scoped tools use it when the log offers it and
// read the global log with a filter otherwise.
type TenantLog interface {
	// ReadTenant returns up to limit events of tenant after the given
	// position in log order, with ReadAll's guarantee: an event not
	// returned now is never positioned at or before the last returned one.
	ReadTenant(ctx context.Context, tenant string, after event.Position, limit int) ([]event.Record, error)
}

// IdempotencyRecord is the stored outcome of a command sent with an
// idempotency key.
type IdempotencyRecord struct {
	RequestHash string
	Response    []byte
	CreatedAt   time.Time
}

// IdempotencyStore keeps command outcomes by (tenant, key). Appends record
// theirs atomically through AppendRequest.Idempotency; outcomes that append
// nothing (a rejected command) are saved with SaveIdempotency.
type IdempotencyStore interface {
	// LookupIdempotency returns the record for key, if any.
	LookupIdempotency(ctx context.Context, tenant, key string) (IdempotencyRecord, bool, error)
	// SaveIdempotency records an outcome that appended no events.
	// Errors: ErrIdempotencyKeyExists when the key is already recorded.
	SaveIdempotency(ctx context.Context, tenant, key, requestHash string, response []byte) error
}

// StreamVersion names one version of one stream.
type StreamVersion struct {
	Tenant  string
	Stream  string
	Version int64
}

// VersionLocator is implemented by logs that can say where given stream
// versions sit in the global log. Projection runners use it to prove that
// a stream's versions arrive contiguous when their own memory of the
// stream has run out.
type VersionLocator interface {
	// LocateVersions returns, for each ref, its global position and
	// whether it exists at all.
	LocateVersions(ctx context.Context, refs []StreamVersion) (positions []event.Position, found []bool, err error)
}
