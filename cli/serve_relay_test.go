package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
)

func TestRelaySettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vars             map[string]string
		mode, url, topic string
		err              string
	}{
		{vars: nil, mode: relayOff, topic: "strata_events"},
		{vars: map[string]string{"STRATA_RELAY_URL": "nats://nats:4222"}, mode: relayNATS, url: "nats://nats:4222", topic: "strata_events"},
		{vars: map[string]string{"STRATA_RELAY_URL": "nats://nats:4222", "STRATA_RELAY_TOPIC": "orders"}, mode: relayNATS, url: "nats://nats:4222", topic: "orders"},
		{vars: map[string]string{"STRATA_RELAY_URL": "nats://nats:4222", "STRATA_RELAY": "off"}, mode: relayOff, url: "nats://nats:4222", topic: "strata_events"},
		{vars: map[string]string{"STRATA_RELAY": "sql"}, mode: relaySQL, topic: "strata_events"},
		{vars: map[string]string{"STRATA_RELAY": "SQL"}, mode: relaySQL, topic: "strata_events"},
		{vars: map[string]string{"STRATA_RELAY": "nats"}, err: "needs STRATA_RELAY_URL"},
		{vars: map[string]string{"STRATA_RELAY_URL": "http://nats:4222"}, err: "want nats://host:port"},
		{vars: map[string]string{"STRATA_RELAY": "sql", "STRATA_RELAY_URL": "nats://nats:4222"}, err: "unset STRATA_RELAY_URL"},
		{vars: map[string]string{"STRATA_RELAY": "sql", "STRATA_RELAY_TOPIC": "orders"}, err: "only"},
		{vars: map[string]string{"STRATA_RELAY": "kafka"}, err: "want off, sql or nats"},
	} {
		mode, url, topic, err := relaySettings(exampleEnv(testEnv(c.vars)))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: error %v, want one about %q", c.vars, err, c.err)
			}
			continue
		}
		if err != nil || mode != c.mode || url != c.url || topic != c.topic {
			t.Errorf("%v: %q %q %q %v, want %q %q %q", c.vars, mode, url, topic, err, c.mode, c.url, c.topic)
		}
	}
	if got := redactURL("nats://user:secret@nats:4222"); strings.Contains(got, "secret") {
		t.Errorf("redacted URL %s shows the password", got)
	}
}

// TestServeRelaysToSQL runs serve with STRATA_RELAY=sql, creates an order
// with the printed curl line and waits for its event in the relay's table,
// published by the projector role, with /readyz reporting the relay.
func TestServeRelaysToSQL(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_RELAY": "sql"}
	base, banner, stopServe := startServe(t, vars)
	stop := sync.OnceValue(stopServe)
	defer stop()
	var curl string
	for _, l := range banner {
		if strings.HasPrefix(strings.TrimSpace(l), "curl ") {
			curl = strings.TrimSpace(l)
		}
	}
	res, err := http.DefaultClient.Do(parseCurl(t, curl))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create order: %d %s", res.StatusCode, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var n int
		var tenant, typ string
		err := conn.QueryRow(ctx, `SELECT count(*), coalesce(max(m.metadata->>'tenant'), ''), coalesce(max(m.metadata->>'type'), '')
FROM strata.watermill_strata_events m JOIN strata.events e ON e.event_id = (m.metadata->>'event_id')::uuid AND e.tenant_id = m.metadata->>'tenant'`).Scan(&n, &tenant, &typ)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			if tenant != devTenant || typ != "order.created" {
				t.Errorf("relayed event of tenant %q and type %q", tenant, typ)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the event never reached the relay's table")
		case <-time.After(50 * time.Millisecond):
		}
	}
	res, err = http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct{ Checks map[string]string }
	_ = json.NewDecoder(res.Body).Decode(&ready)
	res.Body.Close()
	if ready.Checks["relay"] != "ok" {
		t.Errorf("/readyz checks %v, want relay ok", ready.Checks)
	}
	if code := stop(); code != exitOK {
		t.Errorf("serve exited %d", code)
	}
}
