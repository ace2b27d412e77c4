package esdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Store implements eventstore.Store, eventstore.Log and
// eventstore.IdempotencyStore on EventStoreDB/KurrentDB. It is safe for
// concurrent use. Consumers that want tracing or metrics wrap it: every
// method is on the port's interfaces except Ping, LatestCheckpoint and
// Close.
type Store struct {
	cfg   config
	names naming
	conn  *conn
	// records is the connection for AppendRecords (records_conn.go).
	records *recordsConn
	locks   keyLocks
	log     *globalLog
}

var (
	_ eventstore.Store            = (*Store)(nil)
	_ eventstore.Log              = (*Store)(nil)
	_ eventstore.IdempotencyStore = (*Store)(nil)
)

// Option configures a Store.
type Option func(*config)

type config struct {
	namespace       string
	idem            eventstore.IdempotencyStore
	logger          *slog.Logger
	duplicateWindow int
	pollWait        time.Duration
	maxCursors      int
	catchUpWait     time.Duration // tests only; defaultCatchUpWait otherwise
}

// Defaults of the options.
const (
	DefaultDuplicateWindow = 32
	DefaultPollWait        = 200 * time.Millisecond
	DefaultMaxCursors      = 16
)

func (c *config) setDefaults() {
	if c.namespace == "" {
		c.namespace = DefaultNamespace
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.duplicateWindow == 0 {
		c.duplicateWindow = DefaultDuplicateWindow
	}
	if c.pollWait == 0 {
		c.pollWait = DefaultPollWait
	}
	if c.maxCursors == 0 {
		c.maxCursors = DefaultMaxCursors
	}
}

func (c config) validate() error {
	var errs []error
	if !namespacePattern.MatchString(c.namespace) {
		errs = append(errs, fmt.Errorf("namespace %q must match %s", c.namespace, namespacePattern))
	}
	if c.duplicateWindow < 0 && c.duplicateWindow != -1 {
		errs = append(errs, fmt.Errorf("duplicate window %d must be positive, or -1 to disable the check", c.duplicateWindow))
	}
	if c.pollWait < 0 {
		errs = append(errs, fmt.Errorf("poll wait %s must not be negative", c.pollWait))
	}
	if c.maxCursors < 1 {
		errs = append(errs, fmt.Errorf("max subscriptions %d must be at least 1", c.maxCursors))
	}
	return errors.Join(errs...)
}

// WithNamespace sets the prefix of every stream name (default "strata",
// pattern [a-z][a-z0-9_]{0,31}). Stores with different namespaces share a
// server without seeing each other's streams or global log.
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithIdempotencyStore sets where command outcomes are recorded (the
// PostgreSQL store: ARCHITECTURE decision 4). Without it, appends that ask
// for idempotency fail with ErrInvalidAppend and the IdempotencyStore
// methods fail.
func WithIdempotencyStore(s eventstore.IdempotencyStore) Option {
	return func(c *config) { c.idem = s }
}

// WithLogger sets the logger for the adapter's own warnings (resubscribes,
// skipped streams, idempotency records that could not be written). The
// client library's own logging is always off: it prints to the standard
// logger and may repeat connection details.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithDuplicateWindow sets how many of the stream's last events an append
// checks for its event IDs before writing (default 32; -1 disables the
// check). See the package documentation, "Duplicate events".
func WithDuplicateWindow(n int) Option { return func(c *config) { c.duplicateWindow = n } }

// WithPollWait sets how long ReadAll waits for a first event when none is
// buffered before it returns an empty page (default 200 ms).
func WithPollWait(d time.Duration) Option { return func(c *config) { c.pollWait = d } }

// WithMaxSubscriptions bounds the catch-up subscriptions ReadAll keeps open
// (default 16). Each reader that pages through the log on its own (each
// projection runner, each rebuild) keeps one; with more readers than this,
// they evict each other's and every page resubscribes.
func WithMaxSubscriptions(n int) Option { return func(c *config) { c.maxCursors = n } }

// knownSettings are the connection string settings EventStore-Client-Go
// v4.2.0 understands (lower case). Others are refused here, because the
// client would ignore them with a log line on the standard logger.
var knownSettings = map[string]bool{
	"discoveryinterval": true, "gossiptimeout": true, "maxdiscoverattempts": true,
	"nodepreference": true, "keepaliveinterval": true, "keepalivetimeout": true,
	"tls": true, "tlscafile": true, "usercertfile": true, "userkeyfile": true,
	"tlsverifycert": true, "defaultdeadline": true,
}

// parseConnectionString validates and parses an esdb:// or esdb+discover://
// connection string. Its errors never contain the string or its
// credentials.
func parseConnectionString(raw string) (*esdb.Configuration, redactor, error) {
	u, err := url.Parse(raw)
	if err != nil { // url.Error repeats the input: do not wrap it
		return nil, redactor{}, errors.New("esdb: the connection string is not a URL")
	}
	var red redactor
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			red.secrets = append(red.secrets, pw)
		}
	}
	if u.Scheme != "esdb" && u.Scheme != "esdb+discover" {
		return nil, red, fmt.Errorf("esdb: connection string scheme %q is not esdb:// or esdb+discover://", red.redact(u.Scheme))
	}
	for key := range u.Query() {
		if !knownSettings[strings.ToLower(key)] {
			return nil, red, fmt.Errorf("esdb: unknown connection string setting %q", red.redact(key))
		}
	}
	cfg, err := esdb.ParseConnectionString(raw)
	if err != nil {
		return nil, red, fmt.Errorf("esdb: connection string: %s", red.redact(err.Error()))
	}
	cfg.Logger = esdb.NoopLogging()
	return cfg, red, nil
}

// Open returns a store for the server at connectionString
// (esdb://[user:password@]host:port[,host:port...][?settings] or
// esdb+discover://...). It does no I/O: the first call connects, and fails
// with eventstore.ErrUnavailable while the server cannot be reached (Ping
// checks it). ctx is unused and kept for symmetry with other constructors.
func Open(ctx context.Context, connectionString string, opts ...Option) (*Store, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("esdb: %w", err)
	}
	names, err := newNaming(cfg.namespace)
	if err != nil {
		return nil, fmt.Errorf("esdb: %w", err)
	}
	esCfg, red, err := parseConnectionString(connectionString)
	if err != nil {
		return nil, err
	}
	c, err := newConn(esCfg, red)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, names: names, conn: c, records: newRecordsConn(esCfg, red)}
	s.log = newGlobalLog(s)
	return s, nil
}

// Close ends every subscription and releases the client. Calls after Close
// fail with ErrClosed.
func (s *Store) Close() error {
	s.log.close()
	s.records.close()
	s.conn.close(5 * time.Second)
	return nil
}

// Ping reads a stream that never exists, to check that the server answers
// and accepts the credentials.
func (s *Store) Ping(ctx context.Context) error {
	err := s.conn.call(ctx, "ping", func(c *esdb.Client) error {
		rs, err := c.ReadStream(ctx, s.names.prefix+"ping", esdb.ReadStreamOptions{}, 1)
		if err != nil {
			return err
		}
		defer rs.Close()
		_, err = rs.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	})
	if errors.Is(err, errNotFound) {
		return nil
	}
	return err
}

// Append implements eventstore.Store. An append whose events carry tags,
// or that has a condition, goes through AppendRecords (records.go, tags.go:
// KurrentDB 25.1 or later); the others through the v1 Append.
func (s *Store) Append(ctx context.Context, req eventstore.AppendRequest) (eventstore.AppendResult, error) {
	if req.Tenant == "" {
		return eventstore.AppendResult{}, eventstore.ErrNoTenant
	}
	name, err := s.names.encode(req.Tenant, req.Stream)
	if err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("%w: %w", ErrInvalidAppend, err)
	}
	op := "append " + req.Tenant + "/" + req.Stream
	if len(req.Events) == 0 {
		return eventstore.AppendResult{}, fmt.Errorf("%s: %w: no events", op, ErrInvalidAppend)
	}
	expected, err := expectedRevision(req.Expected)
	if err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := validCondition(req.Condition); err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("%s: %w", op, err)
	}
	part, err := s.newRecordsPart(req.Tenant, req.Stream, req.Expected, req.Events)
	if err != nil {
		return eventstore.AppendResult{}, fmt.Errorf("%s: %w", op, err)
	}
	run := func() (eventstore.AppendResult, error) {
		if !part.tagged && req.Condition == nil {
			return s.appendEvents(ctx, op, name, req.Expected, expected, part.data)
		}
		res, _, err := s.appendRecords(ctx, op, req.Tenant, []recordsPart{part}, req.Condition)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		return res[0], nil
	}
	if req.Idempotency == nil {
		return run()
	}
	key := req.Idempotency
	return idempotent(ctx, s, op, req.Tenant, key.Key, key.RequestHash, key.Response, run)
}

// idempotent runs an append (run) under the command's idempotency key:
// the key is looked up first (under a per-key lock, so duplicates in this
// process wait for each other), and the outcome, built by respond, is
// recorded after the append succeeded. The package documentation explains
// what remains between the two writes.
func idempotent[R any](ctx context.Context, s *Store, op, tenant, key, requestHash string, respond func(R) ([]byte, error), run func() (R, error)) (R, error) {
	var zero R
	idem := s.cfg.idem
	if idem == nil {
		return zero, fmt.Errorf("%s: %w: idempotency requested, but the store has no idempotency store", op, ErrInvalidAppend)
	}
	if respond == nil {
		return zero, fmt.Errorf("%s: %w: idempotency without a Response function", op, ErrInvalidAppend)
	}
	unlock, err := s.locks.lock(ctx, tenant+"\x00"+key)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", op, err)
	}
	defer unlock()
	_, found, err := idem.LookupIdempotency(ctx, tenant, key)
	if err != nil {
		return zero, fmt.Errorf("%s: look up idempotency key: %w", op, err)
	}
	if found {
		return zero, fmt.Errorf("%s: %w", op, eventstore.ErrIdempotencyKeyExists)
	}
	res, err := run()
	if err != nil {
		return zero, err
	}
	// The events are written: from here on the command has happened, and a
	// failure to record it must not be reported as a failure of the command.
	// The record is written even if the caller has gone away meanwhile.
	resp, err := respond(res)
	if err != nil {
		s.cfg.logger.Error("eventstoredb: events appended but the idempotent response could not be built",
			"op", op, "err", err)
		return res, nil
	}
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = idem.SaveIdempotency(saveCtx, tenant, key, requestHash, resp)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, eventstore.ErrIdempotencyKeyExists):
		// Another process executed the same command concurrently and
		// recorded it first. With the handler's deterministic event IDs and
		// exact expected versions both appends wrote the same events once
		// (one of them was deduplicated by the server); the stored outcome
		// describes them.
		return zero, fmt.Errorf("%s: %w", op, eventstore.ErrIdempotencyKeyExists)
	default:
		s.cfg.logger.Error("eventstoredb: events appended but the idempotency record was not saved; a retry of this command will not find it",
			"op", op, "err", err)
		return res, nil
	}
}

// appendEvents writes data to stream name after the duplicate check.
func (s *Store) appendEvents(ctx context.Context, op, name string, exp eventstore.ExpectedVersion, expected esdb.ExpectedRevision, data []esdb.EventData) (eventstore.AppendResult, error) {
	if err := s.checkDuplicates(ctx, op, name, exp, data); err != nil {
		return eventstore.AppendResult{}, err
	}
	var wr *esdb.WriteResult
	err := s.conn.call(ctx, op, func(c *esdb.Client) error {
		var err error
		wr, err = c.AppendToStream(ctx, name, esdb.AppendToStreamOptions{ExpectedRevision: expected}, data...)
		return err
	})
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	n := int64(len(data))
	last := versionOf(wr.NextExpectedVersion)
	res := eventstore.AppendResult{
		FirstVersion: last - n + 1,
		LastVersion:  last,
		Position:     positionOf(esdb.Position{Commit: wr.CommitPosition, Prepare: wr.PreparePosition}),
	}
	// The result's position must be the last event's $all position (it is
	// the client's consistency token, compared with projection
	// checkpoints). For one event the server's answer is that position. For
	// several, and for an append the server deduplicated (it may answer
	// without a position), read the last event back.
	if n > 1 || res.Position.IsZero() {
		pos, err := s.readBackPosition(ctx, op, name, wr.NextExpectedVersion, data[n-1].EventID)
		if err != nil {
			s.cfg.logger.Warn("eventstoredb: appended, but the last event's position could not be read back; the server's answer is used",
				"stream", name, "err", err)
		} else {
			res.Position = pos
		}
	}
	return res, nil
}

// eachEvent calls fn with the events of a stream read from `from` in
// direction dir, up to count, until fn returns false; a stream that does
// not exist has none.
func (s *Store) eachEvent(ctx context.Context, op, name string, dir esdb.Direction, from esdb.StreamPosition, count uint64, fn func(*esdb.RecordedEvent) (bool, error)) error {
	err := s.conn.call(ctx, op, func(c *esdb.Client) error {
		rs, err := c.ReadStream(ctx, name, esdb.ReadStreamOptions{Direction: dir, From: from}, count)
		if err != nil {
			return err
		}
		defer rs.Close()
		for {
			ev, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if more, err := fn(ev.OriginalEvent()); !more || err != nil {
				return err
			}
		}
	})
	if errors.Is(err, errNotFound) {
		return nil
	}
	return err
}

// errNoPositions: a server before 22.6 reports no $all position in
// stream reads, which tags need.
var errNoPositions = errors.New("the server reports no positions in stream reads (before 22.6)")

func (s *Store) readBackPosition(ctx context.Context, op, name string, rev uint64, id uuid.UUID) (event.Position, error) {
	found := false
	var pos event.Position
	err := s.eachEvent(ctx, op+": read back", name, esdb.Backwards, esdb.Revision(rev), 1, func(e *esdb.RecordedEvent) (bool, error) {
		if e.EventID != id || e.EventNumber != rev {
			return false, fmt.Errorf("revision %d holds event %s, not %s", rev, e.EventID, id)
		}
		found = true
		if pos = positionOf(e.Position); pos.IsZero() {
			return false, errNoPositions
		}
		return false, nil
	})
	if err == nil && !found {
		err = fmt.Errorf("%s: read back: revision %d of %s is not there", op, rev, name)
	}
	return pos, err
}

// checkDuplicates refuses an append whose event IDs are already among the
// stream's last events before the expected position. ESDB itself accepts
// them there: its idempotency check only looks at the revisions after the
// expected one, so a command retried after reloading the stream (expected
// version = the new head) would store its events twice.
func (s *Store) checkDuplicates(ctx context.Context, op, name string, exp eventstore.ExpectedVersion, data []esdb.EventData) error {
	if s.cfg.duplicateWindow < 0 {
		return nil
	}
	var from esdb.StreamPosition
	switch {
	case exp == eventstore.NoStream || exp == 0:
		return nil // the stream must be empty: nothing to repeat
	case exp > 0:
		from = esdb.Revision(uint64(exp) - 1)
	default:
		from = esdb.End{}
	}
	window := max(s.cfg.duplicateWindow, len(data))
	ids := make(map[uuid.UUID]bool, len(data))
	for _, d := range data {
		ids[d.EventID] = true
	}
	var dup *esdb.RecordedEvent
	err := s.eachEvent(ctx, op, name, esdb.Backwards, from, uint64(window), func(e *esdb.RecordedEvent) (bool, error) {
		if ids[e.EventID] {
			dup = e
			return false, nil
		}
		return true, nil
	})
	switch {
	case errors.Is(err, ErrStreamDeleted):
		return nil // the append itself will say what is wrong, if anything
	case err != nil:
		return err
	case dup != nil:
		return fmt.Errorf("%s: %w: event %s is already stored as version %d",
			op, eventstore.ErrVersionConflict, dup.EventID, versionOf(dup.EventNumber))
	}
	return nil
}

// ReadStream implements eventstore.Store.
func (s *Store) ReadStream(ctx context.Context, tenant, stream string, after int64) ([]event.Record, error) {
	if tenant == "" {
		return nil, eventstore.ErrNoTenant
	}
	name, err := s.names.encode(tenant, stream)
	if err != nil {
		return nil, fmt.Errorf("read stream: %w", err)
	}
	op := "read stream " + tenant + "/" + stream
	var out []event.Record
	err = s.eachEvent(ctx, op, name, esdb.Forwards, readFrom(after), math.MaxInt64, func(e *esdb.RecordedEvent) (bool, error) {
		rec, ok, err := s.names.record(e)
		if err != nil {
			return false, err
		}
		if !ok || rec.Tenant != tenant || rec.Stream != stream {
			return false, fmt.Errorf("stream %s returned an event of %s", name, e.StreamID)
		}
		if rec.Version > after {
			out = append(out, rec)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errNoIdempotencyStore is returned by the IdempotencyStore methods of a
// store opened without WithIdempotencyStore.
var errNoIdempotencyStore = errors.New("esdb: no idempotency store configured (WithIdempotencyStore)")

// LookupIdempotency implements eventstore.IdempotencyStore by delegation.
func (s *Store) LookupIdempotency(ctx context.Context, tenant, key string) (eventstore.IdempotencyRecord, bool, error) {
	if s.cfg.idem == nil {
		return eventstore.IdempotencyRecord{}, false, errNoIdempotencyStore
	}
	return s.cfg.idem.LookupIdempotency(ctx, tenant, key)
}

// SaveIdempotency implements eventstore.IdempotencyStore by delegation. It
// takes the same per-key lock as an idempotent Append.
func (s *Store) SaveIdempotency(ctx context.Context, tenant, key, requestHash string, response []byte) error {
	if s.cfg.idem == nil {
		return errNoIdempotencyStore
	}
	unlock, err := s.locks.lock(ctx, tenant+"\x00"+key)
	if err != nil {
		return err
	}
	defer unlock()
	return s.cfg.idem.SaveIdempotency(ctx, tenant, key, requestHash, response)
}
