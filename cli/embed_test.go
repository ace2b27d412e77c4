package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestServerEmbedsInAProgramsOwnMux: a program mounts strata's Handler
// beside its own route on its own server and runs the workers with Run.
// An order created through the program's listener is read back with its
// consistency token (the projection runner, a worker, applied it); the
// program's own route answers; Run returns nil once its context ends, and
// Close releases the pools.
func TestServerEmbedsInAProgramsOwnMux(t *testing.T) {
	url := pgtest.NewDatabase(t)
	secret := "embed-test-secret-0123456789abcdef"
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": secret,
		"STRATA_PROJECTION_POLL": "50ms"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := NewServer(ctx, ServerOptions{Getenv: testEnv(vars), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, examples.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the program's own") })
	mux.Handle("/", s.Handler())
	mux.Handle("GET /internal/metrics", s.MetricsHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	rctx, stopWorkers := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- s.Run(rctx) }()

	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "ops", Tenant: "acme"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	status, raw, _ := apiCall(t, nil, srv.URL, tok, http.MethodPost, "/v1/orders", `{"order_id":"o-1","customer_id":"c-1","currency":"EUR"}`)
	if status != http.StatusCreated {
		t.Fatalf("create o-1 through the program's listener: %d %s", status, raw)
	}
	var created struct{ Position string }
	if err := json.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	status, raw, _ = apiCall(t, nil, srv.URL, tok, http.MethodGet, "/v1/orders/o-1?wait=10s", "", "X-Consistency-Token", created.Position)
	if status != http.StatusOK {
		t.Fatalf("read o-1 with its token (the workers apply it): %d %s", status, raw)
	}
	for path, want := range map[string]int{"/hello": 200, "/readyz": 200, "/internal/metrics": 200, "/v1/nope": 404} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, res.StatusCode, want)
		}
	}

	stopWorkers()
	select {
	case err := <-ran:
		if err != nil {
			t.Errorf("Run returned %v after its context ended, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context's end")
	}
}
