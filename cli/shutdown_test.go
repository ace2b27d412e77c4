package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/pgtest"
)

// strataProcess starts this test binary as `strata serve` in a process of
// its own and returns its base URL.
func strataProcess(t *testing.T, vars map[string]string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "STRATA_TEST_AS_MAIN=1", "STRATA_TEST_ARGS="+strings.Join(append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), " "))
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) //nolint:errcheck
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		pattern := regexp.MustCompile(`serving on (http://\S+)`)
		for sc.Scan() {
			if m := pattern.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	select {
	case u := <-urls:
		return cmd, u
	case <-time.After(60 * time.Second):
		t.Fatal("strata serve did not start")
		return nil, ""
	}
}

// TestSIGTERMUnderLoad: SIGTERM while commands and projections are busy
// exits 0 within the shutdown deadline; every acknowledged command's
// events are stored, and no projection batch is half-applied (the read
// model, once caught up, agrees with the log exactly).
func TestSIGTERMUnderLoad(t *testing.T) {
	url := pgtest.NewDatabase(t)
	dataDir := t.TempDir()
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": dataDir, "STRATA_LOG_LEVEL": "error",
		"STRATA_RATE_COMMANDS": "unlimited", "STRATA_PROJECTION_BATCH": "50"}
	cmd, base := strataProcess(t, vars)
	secret, err := auth.LoadOrCreateSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := auth.Sign(secret, auth.Claims{Subject: "load", Tenant: "t-a"}, time.Hour)
	client := &http.Client{Timeout: 30 * time.Second}

	var mu sync.Mutex
	acked := map[string]int{} // order -> acknowledged version
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("o-%d-%d", w, i)
				for v, req := range []struct{ path, body string }{
					{"/v1/orders", fmt.Sprintf(`{"order_id":%q,"customer_id":"c","currency":"EUR"}`, id)},
					{"/v1/orders/" + id + "/lines", `{"product_id":"p","quantity":1,"unit_price":{"amount":10,"currency":"EUR"}}`},
					{"/v1/orders/" + id + "/place", ``},
				} {
					r, _ := http.NewRequest("POST", base+req.path, strings.NewReader(req.body))
					r.Header.Set("Authorization", "Bearer "+tok)
					r.Header.Set("Content-Type", "application/json")
					res, err := client.Do(r)
					if err != nil {
						return // the server went away
					}
					io.Copy(io.Discard, res.Body) //nolint:errcheck
					res.Body.Close()
					if res.StatusCode/100 != 2 {
						return
					}
					mu.Lock()
					acked[id] = v + 1
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	began := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	werr := make(chan error, 1)
	go func() { werr <- cmd.Wait() }()
	select {
	case err := <-werr:
		if err != nil {
			t.Fatalf("serve exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("serve did not exit within the %s shutdown deadline", shutdownTimeout)
	}
	took := time.Since(began)
	close(stop)
	wg.Wait()
	t.Logf("exited 0 %s after SIGTERM with %d orders acknowledged", took.Round(time.Millisecond), len(acked))
	if len(acked) == 0 {
		t.Fatal("no command was acknowledged before the signal")
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	stored := map[string]int{}
	rows, _ := conn.Query(ctx, `SELECT stream_id, max(version) FROM strata.events WHERE tenant_id = 't-a' GROUP BY stream_id`)
	for rows.Next() {
		var s string
		var v int
		rows.Scan(&s, &v) //nolint:errcheck
		stored[strings.TrimPrefix(s, "order-")] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, v := range acked {
		if stored[id] < v {
			t.Errorf("order %s: acknowledged at version %d, stored at %d", id, v, stored[id])
		}
	}
	// Whatever batch was in flight either committed or did not: the read
	// model at its checkpoint agrees with the log up to that checkpoint.
	// Start the projector again and let it catch up; then every order's
	// row carries the version the log has.
	_, base2 := strataProcess(t, vars, "--roles", "projector,query")
	deadline := time.Now().Add(60 * time.Second)
	for {
		var behind int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT stream_id, max(version) v FROM strata.events GROUP BY stream_id) e
			LEFT JOIN strata.order_details d ON d.tenant_id = 't-a' AND 'order-' || d.order_id = e.stream_id
			WHERE d.version IS DISTINCT FROM e.v`).Scan(&behind)
		if err != nil {
			t.Fatal(err)
		}
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders' read models disagree with the log a minute after restart (%s)", behind, base2)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
