package httpapi_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/httpapi"
)

// quiet swallows the request lines of tests that are not about logging.
var quiet = slog.New(slog.DiscardHandler)

func TestInFlightConfig(t *testing.T) {
	t.Parallel()
	if _, err := httpapi.NewInFlightCap(httpapi.InFlightConfig{Max: -1}); err == nil {
		t.Error("negative Max accepted")
	}
	for path, want := range map[string]bool{"/livez": true, "/readyz": true, "/livez/": false, "/v1/livez": false, "/": false} {
		if got := httpapi.IsProbe(httptest.NewRequest(http.MethodGet, path, nil)); got != want {
			t.Errorf("IsProbe(%s) = %v", path, got)
		}
	}
}

// The cap holds Max requests in a handler that blocks until released; the
// next one is shed at once with 503 and Retry-After: 1, probes still
// answer, and after the release the cap admits again.
func TestInFlightCapShedsBeyondMax(t *testing.T) {
	t.Parallel()
	const max = 4
	var shed atomic.Int64
	capper, err := httpapi.NewInFlightCap(httpapi.InFlightConfig{Max: max, ShedFunc: func(*http.Request) { shed.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 100)
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	srv := httptest.NewServer(httpapi.LogRequests(quiet)(capper.Middleware(mux)))
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 32
	get := func(path string) (*http.Response, []byte, time.Duration) {
		start := time.Now()
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Error(err)
			return nil, nil, 0
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body, time.Since(start)
	}

	var wg sync.WaitGroup
	held := make(chan int, max)
	for range max {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, _, _ := get("/block"); resp != nil {
				held <- resp.StatusCode
			}
		}()
	}
	for range max {
		<-started
	}
	if n := capper.InFlight(); n != max {
		t.Fatalf("%d in flight, want %d", n, max)
	}

	// Saturated: more requests are shed at once, none reaches the handler.
	for range 20 {
		resp, body, took := get("/block")
		if resp == nil {
			continue
		}
		var shape struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(body, &shape) //nolint:errcheck
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || shape.Error.Code != httpapi.CodeUnavailable {
			t.Fatalf("beyond the cap: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		if took > 2*time.Second {
			t.Errorf("the shed request waited %v", took)
		}
	}
	select {
	case <-started:
		t.Fatal("a request beyond the cap reached the handler")
	default:
	}
	if resp, _, _ := get("/livez"); resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("probe under saturation: %v", resp)
	}
	if shed.Load() != 20 {
		t.Errorf("ShedFunc saw %d", shed.Load())
	}

	close(release)
	wg.Wait()
	close(held)
	for status := range held {
		if status != http.StatusNoContent {
			t.Errorf("held request answered %d", status)
		}
	}
	if n := capper.InFlight(); n != 0 {
		t.Errorf("%d in flight after the release", n)
	}
	if resp, _, _ := get("/block"); resp == nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("after the release: %v", resp)
	}
}

// Under a storm the cap is never exceeded and the count returns to zero.
func TestInFlightCapUnderConcurrency(t *testing.T) {
	t.Parallel()
	const max = 8
	capper, err := httpapi.NewInFlightCap(httpapi.InFlightConfig{Max: max})
	if err != nil {
		t.Fatal(err)
	}
	var inside, peak atomic.Int64
	h := httpapi.LogRequests(quiet)(capper.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // hold the slot a little, so that requests overlap
		inside.Add(-1)
	})))
	var wg sync.WaitGroup
	var served, shed atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x", nil))
				if rec.Code == http.StatusServiceUnavailable {
					shed.Add(1)
				} else {
					served.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if peak.Load() > max || capper.InFlight() != 0 || served.Load()+shed.Load() != 64*50 || shed.Load() == 0 {
		t.Errorf("peak %d, in flight %d, served %d, shed %d", peak.Load(), capper.InFlight(), served.Load(), shed.Load())
	}
}
