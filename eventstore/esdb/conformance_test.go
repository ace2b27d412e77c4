package esdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/eventstore/storetest"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Test environment.
const (
	// envURL names a server to run the conformance suite against, e.g.
	// esdb://127.0.0.1:2113?tls=false (a user that may read $all).
	envURL = "STRATA_TEST_ESDB_URL"
	// envImage overrides the image testcontainers starts when envURL is
	// unset and a Docker engine answers.
	envImage     = "STRATA_TEST_ESDB_IMAGE"
	defaultImage = "docker.kurrent.io/kurrent-latest/kurrentdb:latest"
)

// TestConformance runs the port's conformance suite against a real
// EventStoreDB/KurrentDB, with idempotency records in PostgreSQL as in
// production. Every harness gets a namespace of its own, so it sees an
// empty store (its streams and its global log) on a shared server. When
// there is no server, it says so in one line and passes.
func TestConformance(t *testing.T) {
	url, reason := conformanceServer(t)
	if url == "" {
		fmt.Printf("EventStoreDB conformance suite not run: %s\n", reason)
		return
	}
	harness := func(t *testing.T) storetest.Harness {
		d := testdb.New(t)
		s, err := Open(context.Background(), url,
			WithNamespace(uniqueNamespace(t)),
			WithIdempotencyStore(postgres.New(d.App, nil)),
			WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))),
		)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return storetest.Harness{Store: s, Log: s, Idempotency: s}
	}
	storetest.Run(t, harness)
	// Multi-stream appends, tags and conditions need KurrentDB 25.1
	// (AppendRecords): a server that says it has no AppendRecords (an
	// older image, STRATA_TEST_ESDB_IMAGE) skips them in one line; any
	// other outcome of the probe runs them.
	if err := probeAppendRecords(t, harness); errors.Is(err, ErrUnsupported) {
		fmt.Printf("EventStoreDB multi-stream and condition suites not run: %v\n", err)
		return
	}
	t.Run("Multi", func(t *testing.T) { storetest.RunMulti(t, harness) })
	t.Run("Conditions", func(t *testing.T) { storetest.RunConditions(t, harness) })
}

// probeAppendRecords makes one multi-stream append on a harness of its own.
func probeAppendRecords(t *testing.T, harness func(*testing.T) storetest.Harness) error {
	var err error
	t.Run("ProbeAppendRecords", func(t *testing.T) {
		m := harness(t).Store.(eventstore.MultiAppender)
		_, err = m.AppendMulti(ctxT(t), eventstore.MultiAppendRequest{Tenant: "t-a", Streams: []eventstore.StreamAppend{
			{Stream: "a", Expected: eventstore.NoStream, Events: newEvents(1)}, {Stream: "b", Expected: eventstore.NoStream, Events: newEvents(1)}}})
		if err != nil && !errors.Is(err, ErrUnsupported) {
			t.Fatal(err)
		}
	})
	return err
}

func uniqueNamespace(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b[:])
}

// conformanceServer returns the URL of the server to test against, or ""
// and why there is none. A server that was asked for but does not work
// fails the test.
func conformanceServer(t *testing.T) (url, reason string) {
	if url := os.Getenv(envURL); url != "" {
		checkServer(t, url, "$"+envURL)
		t.Logf("EventStoreDB conformance suite runs against $%s (%s)", envURL, Redact(url))
		return url, ""
	}
	if err := dockerAnswers(); err != nil {
		return "", fmt.Sprintf("%s is unset and no Docker engine answers (%s)", envURL, oneLine(err))
	}
	return startContainer(t), ""
}

// dockerAnswers is testcontainers' own provider check: without an engine it
// fails in well under a millisecond, before any network I/O.
func dockerAnswers() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.Health(ctx)
}

func startContainer(t *testing.T) string {
	image := os.Getenv(envImage)
	if image == "" {
		image = defaultImage
	}
	prefix := "KURRENTDB_"
	if strings.Contains(image, "eventstore") {
		prefix = "EVENTSTORE_"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithExposedPorts("2113/tcp"),
		testcontainers.WithEnv(map[string]string{
			prefix + "INSECURE":        "true",
			prefix + "MEM_DB":          "true",
			prefix + "CLUSTER_SIZE":    "1",
			prefix + "RUN_PROJECTIONS": "None",
		}),
		testcontainers.WithWaitStrategy(wait.ForHTTP("/health/live").
			WithPort("2113/tcp").
			WithStatusCodeMatcher(func(status int) bool { return status >= 200 && status < 300 }).
			WithStartupTimeout(3*time.Minute)),
	)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("a Docker engine answers, but %s did not start (set %s to a server, or %s to another image): %v", image, envURL, envImage, err)
	}
	endpoint, err := ctr.PortEndpoint(ctx, "2113/tcp", "")
	if err != nil {
		t.Fatalf("%s: mapped port: %v", image, err)
	}
	url := "esdb://" + endpoint + "?tls=false"
	checkServer(t, url, image)
	t.Logf("EventStoreDB conformance suite runs against %s on %s (started in %s)", image, endpoint, time.Since(began).Round(time.Millisecond))
	return url
}

// checkServer fails the test unless the server answers within a minute.
func checkServer(t *testing.T, url, what string) {
	s, err := Open(context.Background(), url)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	defer s.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.Ping(ctx)
		if err == nil {
			_, err = s.Head(ctx) // the suite reads $all: check the permission now
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: EventStoreDB does not answer: %v", what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
