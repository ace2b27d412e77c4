package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
)

// TestReadyzWhileCommitsWait: /readyz of a command process is ready only
// while a commit would succeed. With a synchronous standby named that
// never answers (what a primary orphaned by a failover, or one just
// promoted before its standbys connect, looks like), every read still
// works and every commit waits: /readyz must answer 503 and say why, and
// be ready again once commits go through. FAILOVER in make chaos saw
// /readyz answer 200 for seconds while no commit could complete.
func TestReadyzWhileCommitsWait(t *testing.T) {
	srv := pgtest.StartPrivate(t, nil)
	vars := map[string]string{"DATABASE_URL": srv.URL(), "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "error"}
	base, _, stop := startServe(t, vars, "--roles", "command")
	defer stop()
	readyz := func() (int, map[string]string) {
		t.Helper()
		res, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var body struct {
			Checks map[string]string `json:"checks"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("/readyz body %s: %v", raw, err)
		}
		return res.StatusCode, body.Checks
	}
	waitFor := func(want int) map[string]string {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			status, checks := readyz()
			if status == want {
				return checks
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz: %d %v, want %d", status, checks, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if checks := waitFor(http.StatusOK); checks["database_writes"] != "ok" {
		t.Fatalf("healthy: database_writes %q, want ok (checks %v)", checks["database_writes"], checks)
	}

	setSync := func(stmt string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		for _, q := range []string{stmt, "SELECT pg_reload_conf()"} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	setSync("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
	reset := true
	defer func() {
		if reset {
			setSync("ALTER SYSTEM RESET synchronous_standby_names")
		}
	}()
	checks := waitFor(http.StatusServiceUnavailable)
	if got := checks["database_writes"]; !strings.Contains(got, "synchronous standby") {
		t.Errorf("commits waiting: database_writes %q, want it to name the synchronous standby (checks %v)", got, checks)
	}
	if checks["database"] != "ok" {
		t.Errorf("commits waiting: reads still work, database check %q", checks["database"])
	}

	setSync("ALTER SYSTEM RESET synchronous_standby_names")
	reset = false
	waitFor(http.StatusOK)
}
