package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestDatabaseOutage stops PostgreSQL (immediate, like a crash) under load:
// while it is down every request answers 503 with Retry-After, never 500;
// when it is back the service recovers by itself, and no goroutines leak.
func TestDatabaseOutage(t *testing.T) {
	srv := pgtest.StartPrivate(t, nil)
	dataDir := t.TempDir()
	vars := map[string]string{"DATABASE_URL": srv.URL(), "STRATA_DATA_DIR": dataDir, "STRATA_LOG_LEVEL": "error", "STRATA_RATE_COMMANDS": "unlimited"}
	base, _, stop := startServe(t, vars)
	secret, err := auth.LoadOrCreateSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := auth.Sign(secret, auth.Claims{Subject: "load", Tenant: "t-a"}, time.Hour)
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(i int64) (int, string) {
		req, _ := http.NewRequest("POST", base+"/v1/orders", strings.NewReader(fmt.Sprintf(`{"order_id":"o-%d","customer_id":"c","currency":"EUR"}`, i)))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode == 503 && res.Header.Get("Retry-After") == "" {
			return -503, string(body)
		}
		return res.StatusCode, string(body)
	}
	// Warm up, then take the goroutine baseline.
	var seq atomic.Int64
	for i := 0; i < 20; i++ {
		if code, body := post(seq.Add(1)); code != 201 {
			t.Fatalf("warm-up: %d %s", code, body)
		}
	}
	client.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	baseline := runtime.NumGoroutine()

	var mu sync.Mutex
	counts := map[int]int{}
	var bad []string
	var down, up atomic.Bool
	var firstOKAfterUp atomic.Int64
	var upAt atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				code, body := post(seq.Add(1))
				mu.Lock()
				counts[code]++
				switch {
				case code == 201:
					if up.Load() && firstOKAfterUp.Load() == 0 {
						firstOKAfterUp.Store(time.Now().UnixNano())
					}
				case code == 503:
				default:
					bad = append(bad, fmt.Sprintf("%d %s", code, body))
				}
				mu.Unlock()
				if down.Load() {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	if err := srv.StopImmediate(sctx); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	time.Sleep(3 * time.Second)
	if err := srv.Restart(sctx); err != nil {
		t.Fatal(err)
	}
	upAt.Store(time.Now().UnixNano())
	down.Store(false)
	up.Store(true)
	deadline := time.Now().Add(20 * time.Second)
	for firstOKAfterUp.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("responses: %v", counts)
	if len(bad) > 0 {
		t.Fatalf("%d responses were neither 201 nor 503 with Retry-After, e.g. %s", len(bad), bad[0])
	}
	if counts[503] == 0 {
		t.Fatal("no 503 while PostgreSQL was down")
	}
	if firstOKAfterUp.Load() == 0 {
		t.Fatal("no success within 20 s of PostgreSQL's return")
	}
	recovery := time.Duration(firstOKAfterUp.Load() - upAt.Load())
	t.Logf("first success %v after PostgreSQL returned", recovery.Round(time.Millisecond))
	if recovery > 15*time.Second {
		t.Fatalf("recovered after %v, want <= 15 s", recovery)
	}
	client.CloseIdleConnections()
	var now int
	for i := 0; i < 50; i++ { // let pools and connections settle
		time.Sleep(100 * time.Millisecond)
		if now = runtime.NumGoroutine(); now <= baseline+baseline/10+2 {
			break
		}
	}
	if now > baseline+baseline/10+2 {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines %d after recovery, baseline %d:\n%s", now, baseline, buf[:n])
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d", code)
	}
}
