package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The toy domain of these tests: tickets are opened and closed (events
// the test appends), and a "ticket" process assigns each opened ticket
// (a command on an assignment aggregate), then notifies someone (an
// intent through the "notifier" port), and waits for the ticket to be
// closed or for its escalation deadline, which cancels it.

const (
	typeOpened   = "test.opened"
	typeClosed   = "test.closed"
	typeAssigned = "test.assigned"
)

type ticketOpened struct {
	ID string `json:"id"`
	// Title "poison" makes the process's decision fail; "panic-decide"
	// makes Decide panic, "panic-correlate" makes Correlate panic.
	Title string `json:"title"`
	// TimeoutMS is the escalation deadline after the event (default 1h).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Reject makes the assignment refuse.
	Reject bool `json:"reject,omitempty"`
}

func (ticketOpened) EventType() string { return typeOpened }

type ticketClosed struct {
	ID string `json:"id"`
}

func (ticketClosed) EventType() string { return typeClosed }

type ticketAssigned struct {
	Ticket string `json:"ticket"`
}

func (ticketAssigned) EventType() string { return typeAssigned }

var testRegistry = event.NewRegistry(
	event.Codec{Type: typeOpened, Version: 1, New: func() event.Payload { return &ticketOpened{} }},
	event.Codec{Type: typeClosed, Version: 1, New: func() event.Payload { return &ticketClosed{} }},
	event.Codec{Type: typeAssigned, Version: 1, New: func() event.Payload { return &ticketAssigned{} }},
)

// assignment is the aggregate the process's command acts on.
type assignment struct {
	assigned bool
	version  int64
}

var assignments = commands.Aggregate[*assignment]{
	Kind:   "assignment",
	Stream: func(id string) string { return "assign-" + id },
	Load: func(history []event.Payload) (*assignment, error) {
		a := &assignment{}
		for _, p := range history {
			if _, ok := p.(ticketAssigned); ok {
				a.assigned = true
			}
			a.version++
		}
		return a, nil
	},
	Version:  func(a *assignment) int64 { return a.version },
	NotFound: fmt.Errorf("%w: assignment", domain.ErrNotFound),
}

var errAssignRefused = fmt.Errorf("%w: nobody takes this ticket", domain.ErrRejected)

type assign struct {
	Ticket string `json:"ticket"`
	Reject bool   `json:"reject,omitempty"`
}

func (assign) Name() string     { return "test.assign" }
func (c assign) Target() string { return c.Ticket }
func (c assign) Decide(a *assignment, _ time.Time) ([]event.Payload, error) {
	if c.Reject {
		return nil, errAssignRefused
	}
	if a.assigned {
		return nil, nil
	}
	return []event.Payload{ticketAssigned{Ticket: c.Ticket}}, nil
}

// ticketState is the process's state per ticket.
type ticketState struct {
	Ticket   string `json:"ticket"`
	Assigned bool   `json:"assigned"`
	Notified bool   `json:"notified"`
	Reject   bool   `json:"reject,omitempty"`
}

func decideTicket(s ticketState, exists bool, in Input) (Decision[ticketState], error) {
	keep := func(status string) Decision[ticketState] { return Decision[ticketState]{State: s, Status: status} }
	switch in.Kind {
	case InputEvent:
		switch p := in.Event.Payload.(type) {
		case ticketOpened:
			switch p.Title {
			case "poison":
				return Decision[ticketState]{}, errors.New("the ticket's title is poison")
			case "panic-decide":
				panic("the ticket's title makes Decide panic")
			}
			if exists && s.Assigned {
				return keep(statusOf(s)), nil
			}
			timeout := time.Hour
			if p.TimeoutMS > 0 {
				timeout = time.Duration(p.TimeoutMS) * time.Millisecond
			}
			s.Ticket, s.Reject = p.ID, p.Reject
			// A repeated opening decides the same step again: the outbox
			// keeps one.
			return Decision[ticketState]{State: s, Status: "assigning",
				Commands:  []Command{{Step: "assign", Name: "test.assign", Payload: assign{Ticket: p.ID, Reject: p.Reject}}},
				Deadlines: []Deadline{{Name: "escalate", At: in.At.Add(timeout)}},
				Note:      "opened: assigning"}, nil
		case ticketClosed:
			return Decision[ticketState]{State: s, Status: "closed", Done: true, Note: "closed"}, nil
		}
	case InputOutcome:
		o := in.Outcome
		switch o.Step {
		case "assign":
			if !o.OK {
				return Decision[ticketState]{State: s, Status: "unassigned", Done: true, Note: o.Reason}, nil
			}
			s.Assigned = true
			return Decision[ticketState]{State: s, Status: "notifying",
				Intents: []Intent{{Step: "notify", Port: "notifier", Payload: map[string]string{"ticket": s.Ticket}}}}, nil
		case "notify":
			if !o.OK {
				return Decision[ticketState]{State: s, Status: "declined", Done: true, Note: o.Reason}, nil
			}
			s.Notified = true
			return keep("waiting"), nil
		}
	case InputTimeout:
		return Decision[ticketState]{State: s, Status: "cancelled", Done: true, Note: "escalation deadline passed"}, nil
	}
	return Decision[ticketState]{}, fmt.Errorf("unexpected input %s", in.Kind)
}

func statusOf(s ticketState) string {
	switch {
	case s.Notified:
		return "waiting"
	case s.Assigned:
		return "notifying"
	}
	return "assigning"
}

var ticketDefinition = Definition[ticketState]{
	Name:       "ticket",
	EventTypes: []string{typeOpened, typeClosed},
	Correlate: func(ev Event) (string, string, bool) {
		switch p := ev.Payload.(type) {
		case ticketOpened:
			if p.Title == "panic-correlate" {
				panic("the ticket's title makes Correlate panic")
			}
			return p.ID, ev.Stream, true
		case ticketClosed:
			return p.ID, ev.Stream, true
		}
		return "", "", false
	},
	Decide: decideTicket,
}

// testPort is the "notifier": it fails transiently for the keys it is told
// to, refuses others, and applies one effect per key however often it is
// called.
type testPort struct {
	mu      sync.Mutex
	calls   map[string][]time.Time
	effects map[string]int
	fail    map[string]int  // ticket -> transient failures left (-1: forever)
	reject  map[string]bool // ticket -> decline
}

func newTestPort() *testPort {
	return &testPort{calls: map[string][]time.Time{}, effects: map[string]int{}, fail: map[string]int{}, reject: map[string]bool{}}
}

var errPortDown = errors.New("notifier: 503 service unavailable")

func (p *testPort) Execute(_ context.Context, _ domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[key] = append(p.calls[key], time.Now())
	ticket := ticketOf(payload)
	if n := p.fail[ticket]; n != 0 {
		if n > 0 {
			p.fail[ticket] = n - 1
		}
		return nil, errPortDown
	}
	if p.reject[ticket] {
		return nil, &Rejected{Reason: "the notifier declined"}
	}
	if p.effects[key] == 0 {
		p.effects[key] = 1
	}
	return []byte(`{"ref":"n-` + ticket + `"}`), nil
}

func (p *testPort) set(f func(p *testPort)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *testPort) callTimes(key string) []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.calls[key]...)
}

func ticketOf(payload []byte) string {
	var v struct {
		Ticket string `json:"ticket"`
	}
	_ = json.Unmarshal(payload, &v)
	return v.Ticket
}

// clock is a settable clock for deadlines.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// bundle is one test's world: a fresh database, the store, the process.
type bundle struct {
	t       testing.TB
	ctx     context.Context
	url     string
	app     *pgxpool.Pool
	proj    *pgxpool.Pool
	store   *postgres.Store
	manager Manager
	port    *testPort
	spec    Spec
}

func setup(t testing.TB) *bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	d := testdb.New(t)
	return newBundle(ctx, t, d.AdminURL, d.App, d.Projector)
}

func newBundle(ctx context.Context, t testing.TB, url string, app, proj *pgxpool.Pool) *bundle {
	t.Helper()
	store := postgres.New(app, proj)
	handler, err := commands.NewHandler(assignments, store, store, commands.Config{Registry: testRegistry})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(ticketDefinition)
	if err != nil {
		t.Fatal(err)
	}
	port := newTestPort()
	return &bundle{t: t, ctx: ctx, url: url, app: app, proj: proj, store: store, manager: m, port: port,
		spec: Spec{
			Manager:  m,
			Commands: map[string]CommandFunc{"test.assign": Bind[*assignment, assign](handler)},
			Ports:    map[string]Port{"notifier": port},
		}}
}

func quietLogger() *slog.Logger {
	if os.Getenv("PROCESS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// runner makes a runner of the bundle's process with test defaults.
func (b *bundle) runner(cfg RunnerConfig) *Runner {
	b.t.Helper()
	cfg.Registry = testRegistry
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.Poll == 0 {
		cfg.Poll = 20 * time.Millisecond
	}
	if cfg.LeaseRetry == 0 {
		cfg.LeaseRetry = 20 * time.Millisecond
	}
	if cfg.InitialBackoff == 0 {
		cfg.InitialBackoff = 5 * time.Millisecond
		cfg.MaxBackoff = 20 * time.Millisecond
	}
	r, err := NewRunner(b.spec, b.store, b.proj, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

// start runs r until the returned stop is called (or the test ends).
func (b *bundle) start(r *Runner) (stop func()) {
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	b.t.Cleanup(stop)
	return stop
}

// append appends one event of the toy domain to stream ticket-<id>.
func (b *bundle) append(tenant string, p event.Payload) eventstore.AppendResult {
	b.t.Helper()
	typ, sv, data, err := testRegistry.Encode(p)
	if err != nil {
		b.t.Fatal(err)
	}
	var id string
	switch v := p.(type) {
	case ticketOpened:
		id = v.ID
	case ticketClosed:
		id = v.ID
	}
	res, err := b.store.Append(b.ctx, eventstore.AppendRequest{Tenant: tenant, Stream: "ticket-" + id, Expected: eventstore.Any,
		Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: typ, SchemaVersion: sv, Data: data}}})
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

// appendRaw appends one event as stored bytes, bypassing the codec: what
// an import or an old writer may have left in the log.
func (b *bundle) appendRaw(tenant, stream, typ string, schemaVersion int, data string) eventstore.AppendResult {
	b.t.Helper()
	res, err := b.store.Append(b.ctx, eventstore.AppendRequest{Tenant: tenant, Stream: stream, Expected: eventstore.Any,
		Events: []eventstore.NewEvent{{ID: uuid.NewString(), Type: typ, SchemaVersion: schemaVersion, Data: []byte(data)}}})
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

// appendTo appends one event of the toy domain to stream (b.append
// derives the stream from the ticket).
func (b *bundle) appendTo(tenant, stream string, p event.Payload) {
	b.t.Helper()
	typ, sv, data, err := testRegistry.Encode(p)
	if err != nil {
		b.t.Fatal(err)
	}
	b.appendRaw(tenant, stream, typ, sv, string(data))
}

// admin runs fn on a superuser connection (test inspection only).
func (b *bundle) admin(fn func(conn *pgx.Conn)) {
	b.t.Helper()
	conn, err := pgx.Connect(b.ctx, b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(b.ctx, "SET search_path = strata"); err != nil {
		b.t.Fatal(err)
	}
	fn(conn)
}

func (b *bundle) count(sql string, args ...any) int64 {
	b.t.Helper()
	var n int64
	b.admin(func(conn *pgx.Conn) {
		if err := conn.QueryRow(b.ctx, sql, args...).Scan(&n); err != nil {
			b.t.Fatalf("%s: %v", sql, err)
		}
	})
	return n
}

// instance reads one instance as the operator would (projector role).
func (b *bundle) instance(tenant, id string) (InstanceDetail, error) {
	return ReadInstance(b.ctx, b.proj, tenant, "ticket", id)
}

// eventually waits until cond holds, re-checking every few milliseconds,
// until the test's context ends. It waits for a state, never for a time.
func (b *bundle) eventually(what string, cond func() bool) {
	b.t.Helper()
	for !cond() {
		select {
		case <-b.ctx.Done():
			b.t.Fatalf("gave up waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// statusIs waits until the instance has status.
func (b *bundle) statusIs(tenant, id, status string) InstanceDetail {
	b.t.Helper()
	var d InstanceDetail
	b.eventually(fmt.Sprintf("instance %s/%s to be %s", tenant, id, status), func() bool {
		var err error
		d, err = b.instance(tenant, id)
		return err == nil && d.Status == status
	})
	return d
}

func historyKinds(d InstanceDetail) []string {
	var out []string
	for _, h := range d.History {
		out = append(out, h.Kind)
	}
	return out
}

func testRegistryWithout(typ string) *event.Registry {
	var codecs []event.Codec
	for _, c := range []event.Codec{
		{Type: typeOpened, Version: 1, New: func() event.Payload { return &ticketOpened{} }},
		{Type: typeClosed, Version: 1, New: func() event.Payload { return &ticketClosed{} }},
	} {
		if c.Type != typ {
			codecs = append(codecs, c)
		}
	}
	return event.NewRegistry(codecs...)
}

var testPortOK = PortFunc(func(context.Context, domain.TenantID, string, json.RawMessage) (json.RawMessage, error) {
	return nil, nil
})
