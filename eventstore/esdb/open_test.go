package esdb

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

const secret = "s3cr3t-pw"

func TestParseConnectionString(t *testing.T) {
	t.Parallel()
	good := []string{
		"esdb://127.0.0.1:2113?tls=false",
		"esdb://admin:" + secret + "@db:2113?tls=false&maxDiscoverAttempts=3&discoveryInterval=10",
		"esdb://db1:2113,db2:2113,db3:2113?tlsVerifyCert=false&nodePreference=leader",
		"esdb+discover://cluster.example.com:2113?keepAliveTimeout=10000&keepAliveInterval=10000&defaultDeadline=5000",
	}
	for _, s := range good {
		cfg, _, err := parseConnectionString(s)
		if err != nil {
			t.Errorf("%s: %v", Redact(s), err)
			continue
		}
		if cfg.Logger == nil {
			t.Errorf("%s: logger not set", Redact(s))
		}
	}
	bad := []struct {
		in, want string
	}{
		{"postgres://admin:" + secret + "@db:5432/x", "scheme"},
		{"kurrentdb://admin:" + secret + "@db:2113", "scheme"},
		{"esdb://admin:" + secret + "@db:2113?tls=false&maxDiscoverAttempt=1", "unknown connection string setting"},
		{"esdb://admin:" + secret + "@db:2113?tls=maybe", "tls"},
		{"esdb://admin:" + secret + "@db:notaport", "URL"},
		{"esdb://admin:" + secret + "@db:2113/some/path", "path"},
		{"esdb://:" + secret + "@db:2113", "username"},
		{"esdb://admin:" + secret + "@db:2113?maxDiscoverAttempts=x" + secret, "integer"},
		{"\x7fesdb://admin:" + secret + "@db", "not a URL"},
		{"", "scheme"},
	}
	for _, c := range bad {
		_, _, err := parseConnectionString(c.in)
		if err == nil {
			t.Errorf("%q: accepted", Redact(c.in))
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, secret) || strings.Contains(msg, "admin:") || strings.Contains(msg, "@db") {
			t.Errorf("error leaks the connection string: %s", msg)
		}
		if !strings.Contains(msg, c.want) {
			t.Errorf("%q: error %q, want it to mention %q", Redact(c.in), msg, c.want)
		}
	}
}

func TestOpenValidatesOptions(t *testing.T) {
	t.Parallel()
	url := "esdb://127.0.0.1:1?tls=false"
	for _, opts := range [][]Option{
		{WithNamespace("Strata")},
		{WithNamespace("a-b")},
		{WithNamespace("a.b")},
		{WithDuplicateWindow(-2)},
		{WithPollWait(-time.Second)},
		{WithMaxSubscriptions(-1)},
	} {
		if s, err := Open(context.Background(), url, opts...); err == nil {
			s.Close()
			t.Errorf("options %v accepted", opts)
		}
	}
	s, err := Open(context.Background(), url, WithNamespace("tenant_x1"), WithDuplicateWindow(-1))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.ReadStream(context.Background(), "t", "s", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v, want ErrClosed", err)
	}
}

// TestNoServer: with nothing listening, every call fails fast with
// ErrUnavailable and no credentials, and keeps doing so (the client whose
// discovery failed is replaced rather than left closed for good).
func TestNoServer(t *testing.T) {
	t.Parallel()
	url := "esdb://admin:" + secret + "@127.0.0.1:1?tls=false&maxDiscoverAttempts=1&discoveryInterval=10"
	s, err := Open(context.Background(), url, WithPollWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := eventstore.AppendRequest{Tenant: "t-a", Stream: "order-1", Expected: eventstore.NoStream, Events: []eventstore.NewEvent{
		{ID: "0b6c2a8e-3a5b-4c1d-9e2f-1a2b3c4d5e6f", Type: "x.y", SchemaVersion: 1, Data: []byte(`{}`)},
	}}
	calls := []struct {
		name string
		fn   func() error
	}{
		{"append", func() error { _, err := s.Append(ctx, req); return err }},
		{"append again", func() error { _, err := s.Append(ctx, req); return err }},
		{"read stream", func() error { _, err := s.ReadStream(ctx, "t-a", "order-1", 0); return err }},
		{"read all", func() error { _, err := s.ReadAll(ctx, event.Position{}, 10); return err }},
		{"head", func() error { _, err := s.Head(ctx); return err }},
		{"ping", func() error { return s.Ping(ctx) }},
	}
	for _, c := range calls {
		began := time.Now()
		err := c.fn()
		took := time.Since(began)
		if !errors.Is(err, eventstore.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", c.name, err)
		}
		if err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "admin")) {
			t.Errorf("%s: error leaks credentials: %v", c.name, err)
		}
		if took > 5*time.Second { // typically 10 ms; timers on shared CI machines lag

			t.Errorf("%s took %s, want a fast failure", c.name, took)
		}
		if err != nil && strings.Contains(err.Error(), "connection is closed") {
			t.Errorf("%s: the client stayed closed after a failed discovery: %v", c.name, err)
		}
		t.Logf("%s: %s: %v", c.name, took.Round(time.Millisecond), err)
	}
	s.conn.mu.Lock()
	gen := s.conn.gen
	s.conn.mu.Unlock()
	if gen < uint64(len(calls)) {
		t.Errorf("client generation %d after %d failed discoveries: dead clients were not replaced", gen, len(calls))
	}
}
