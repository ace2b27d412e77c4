package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/readmodels/queryapi"
)

// TestQueryReplicaReadYourWrites reads 1,000 of its own writes in a row
// through a real streaming replica (pg_basebackup of the test's own
// primary), 200 of them while the replica's replay is paused
// (pg_wal_replay_pause): every read must see the order the command just
// created. While paused the replica cannot have it, so those reads must
// have waited and fallen back to the primary, and X-Read-Source says so;
// the others are answered by the replica once it has replayed the token.
func TestQueryReplicaReadYourWrites(t *testing.T) {
	primary := testdb.NewPrivate(t, nil, examples.All().Lines()...)
	replica := pgtest.StartReplica(t, primary.Server, nil)
	replicaLogin, err := db.LoginURL(replica.URL(), db.LoginApp)
	if err != nil {
		t.Fatal(err)
	}
	secret := "replica-test-secret-0123456789abcdef"
	base, _, stop := startServe(t, map[string]string{
		"DATABASE_URL": primary.AdminURL, "STRATA_DATA_DIR": t.TempDir(), "STRATA_JWT_SECRET": secret,
		"STRATA_LOG_LEVEL": "warn", "STRATA_QUERY_DATABASE_URL": replicaLogin,
		"STRATA_METRICS_ADDR": "",
	})
	defer stop()
	waitReady(t, base)
	tok, err := auth.Sign([]byte(secret), auth.Claims{Subject: "rw", Tenant: "acme", Scopes: []string{auth.ScopeAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The monitor has sampled the replica as streaming before the first read.
	waitReplicaState(t, base, queryapi.StateStreaming)

	replicaSQL := func(sql string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, replica.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const total, pauseFrom, pauseTo = 1000, 400, 600
	sources := map[string]int{}
	for i := 0; i < total; i++ {
		if i == pauseFrom {
			replicaSQL(`SELECT pg_wal_replay_pause()`)
		}
		if i == pauseTo {
			replicaSQL(`SELECT pg_wal_replay_resume()`)
		}
		id := fmt.Sprintf("o-%d", i)
		status, raw, _ := apiCall(t, nil, base, tok, http.MethodPost, "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`)
		if status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", id, status, raw)
		}
		var created struct{ Position string }
		if err := json.Unmarshal(raw, &created); err != nil {
			t.Fatal(err)
		}
		status, raw, h := apiCall(t, nil, base, tok, http.MethodGet, "/v1/orders/"+id+"?wait=10s", "", queryapi.ConsistencyHeader, created.Position)
		if status != http.StatusOK || !strings.Contains(string(raw), `"order_id":"`+id+`"`) {
			t.Fatalf("read-your-writes %d of %d (%s, replica paused: %v): %d %s (%s: %q)", i+1, total, id, i >= pauseFrom && i < pauseTo, status, raw, queryapi.ReadSourceHeader, h.Get(queryapi.ReadSourceHeader))
		}
		src := h.Get(queryapi.ReadSourceHeader)
		paused := i >= pauseFrom && i < pauseTo
		if paused && !strings.HasPrefix(src, "primary; fallback=") {
			t.Fatalf("read %d, replica paused, answered from %q: want the primary, as a fallback", i+1, src)
		}
		kind, _, _ := strings.Cut(src, ";")
		if paused {
			sources["paused "+src]++
		} else {
			sources[kind]++
		}
	}
	t.Logf("%d of %d reads saw their own write; by source: %v", total, total, sources)
	if unpaused := total - (pauseTo - pauseFrom); sources["replica"] < unpaused/4 {
		t.Errorf("only %d of %d reads outside the pause were answered by the replica: %v", sources["replica"], unpaused, sources)
	}
	if sources["paused primary; fallback="+queryapi.FallbackNoReplica] == 0 {
		t.Errorf("no read during the pause was sent to the primary at once (the monitor did not see the pause): %v", sources)
	}

	// /readyz shows the replica and its lag; the metrics count the reads.
	status, raw, _ := apiCall(t, nil, base, tok, http.MethodGet, "/readyz", "")
	if status != http.StatusOK || !strings.Contains(string(raw), `"replicas":[{"name":"127.0.0.1:`) || !strings.Contains(string(raw), `"query_replicas":"ok"`) {
		t.Errorf("/readyz: %d %s", status, raw)
	}
}

// waitReplicaState waits until /readyz reports every replica in state.
func waitReplicaState(t *testing.T, base, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Replicas []queryapi.ReplicaSample `json:"replicas"`
		}
		err = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		ok := len(body.Replicas) > 0
		for _, r := range body.Replicas {
			ok = ok && r.State == state
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas not %s within 30s: %+v", state, body.Replicas)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
