// Package servetest runs `strata serve` with an application's modules
// in-process, on a private PostgreSQL, for that application's end-to-end
// tests: a module in its own repository drives its routes over HTTP
// through the whole engine (authentication, tenancy, limits, its command
// and query APIs) with a client that holds every request and response to
// the OpenAPI document the server serves (openapitest: the engine's merged
// with the modules' fragments). PostgreSQL's server binaries must be
// installed; nothing needs to be running. A test package that uses it runs
// its TestMain through Main, which stops that PostgreSQL afterwards.
package servetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/cli"
	"github.com/strata-es/strata/cli/openapi/openapitest"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/module"
)

// Main runs the package's tests and then stops the private PostgreSQL
// they started: call it from TestMain.
func Main(m *testing.M) { pgtest.Main(m) }

// Server is one running serve.
type Server struct {
	// URL is the base URL, e.g. http://127.0.0.1:41234.
	URL string
	// Client sends requests and validates each exchange against the
	// document; a mismatch fails the test that started the server.
	Client *http.Client
	secret []byte
}

// Config tunes Start. The zero value serves every role with no process
// managers running (a test turns them on with Env).
type Config struct {
	// Env are environment variables for serve on top of the defaults (a
	// fresh database, a random JWT secret, no tenant directory required,
	// STRATA_PROCESSES=none, warnings only in the log).
	Env map[string]string
	// Args are serve's flags after --addr, e.g. "--roles", "query".
	Args []string
}

// Start runs serve with mods until t ends.
func Start(t testing.TB, cfg Config, mods ...module.Module) *Server {
	t.Helper()
	v, err := openapitest.For(mods...)
	if err != nil {
		t.Fatal(err)
	}
	var s [24]byte
	rand.Read(s[:]) //nolint:errcheck
	secret := hex.EncodeToString(s[:])
	env := map[string]string{
		"DATABASE_URL":                    pgtest.NewDatabase(t),
		"STRATA_DATA_DIR":                 t.TempDir(),
		"STRATA_JWT_SECRET":               secret,
		"STRATA_REQUIRE_TENANT_DIRECTORY": "false",
		"STRATA_PROCESSES":                "none",
		"STRATA_LOG_LEVEL":                "warn",
	}
	for k, val := range cfg.Env {
		env[k] = val
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, cfg.Args...), func(k string) string { return env[k] }, pw, &stderr, mods...)
		pw.Close()
	}()
	url := make(chan string, 1)
	go func() {
		found := false
		serving := regexp.MustCompile(`serving on (http://\S+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := serving.FindStringSubmatch(sc.Text()); m != nil && !found {
				found = true
				url <- m[1]
			}
		}
		close(url)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30 s")
		}
	})
	select {
	case u, ok := <-url:
		if !ok {
			t.Fatalf("serve exited before it served: %s", stderr.String())
		}
		return &Server{URL: u, Client: openapitest.Client(t, v), secret: []byte(secret)}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not start within 60 s: %s", stderr.String())
	}
	return nil
}

// Token returns a bearer token of tenant with the given scopes (none: a
// tenant's user; auth.ScopeAdmin, auth.ScopePlatform).
func (s *Server) Token(t testing.TB, tenant string, scopes ...string) string {
	t.Helper()
	tok, err := auth.Sign(s.secret, auth.Claims{Subject: "servetest", Tenant: domain.TenantID(tenant), Scopes: scopes}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Do sends one request with token (and a JSON body unless body is "") and
// returns the status, the body and the header of the answer; header holds
// name, value pairs.
func (s *Server) Do(t testing.TB, token, method, path, body string, header ...string) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := s.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, raw, res.Header
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
