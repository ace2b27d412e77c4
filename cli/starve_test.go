package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestOneTenantCannotStarveOthers is issue 13's attack on the serve
// wiring, scaled down to a shared cap of 8: tenant A holds more requests
// whose bodies never end than the cap, and sends forged consistency tokens
// with the longest wait. Before, the first took every shared slot until
// ReadTimeout (30 s) and the second held theirs for the whole wait, and
// tenant B got 503. Now A's bodies hold only A's own command slots (A gets
// 429 beyond them), forged tokens are refused at once, A never has more
// queries in flight than its limit, and B is served throughout.
func TestOneTenantCannotStarveOthers(t *testing.T) {
	dataDir := t.TempDir()
	base, _, stop := startServe(t, map[string]string{
		"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": dataDir, "STRATA_LOG_LEVEL": "error",
		"STRATA_MAX_IN_FLIGHT":             "8",
		"STRATA_TENANT_IN_FLIGHT_COMMANDS": "3",
		"STRATA_TENANT_IN_FLIGHT_QUERIES":  "4",
		"STRATA_BODY_TIMEOUT":              "2m", // the stalled bodies stay stalled while the test runs
	})
	defer stop()
	secret, err := auth.LoadOrCreateSecret(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	tokA, _ := auth.Sign(secret, auth.Claims{Subject: "attacker", Tenant: "t-a"}, time.Hour)
	tokB, _ := auth.Sign(secret, auth.Claims{Subject: "victim", Tenant: "t-b"}, time.Hour)
	client := &http.Client{Timeout: 30 * time.Second}
	type answer struct {
		status int
		code   string
		body   string
		took   time.Duration
	}
	send := func(method, path, tok, body string, hdr ...string) answer {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		began := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var shape struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(raw, &shape) //nolint:errcheck
		return answer{res.StatusCode, shape.Error.Code, string(raw), time.Since(began)}
	}
	create := func(tok, id string) answer {
		return send(http.MethodPost, "/v1/orders", tok, fmt.Sprintf(`{"order_id":%q,"customer_id":"c-1","currency":"EUR"}`, id))
	}
	if a := create(tokA, "a-0"); a.status != http.StatusCreated {
		t.Fatalf("A's first order: %d %s", a.status, a.body)
	}
	var last struct{ Position string }
	if a := create(tokB, "b-0"); a.status != http.StatusCreated {
		t.Fatalf("B's first order: %d %s", a.status, a.body)
	} else {
		json.Unmarshal([]byte(a.body), &last) //nolint:errcheck
	}

	// A's bodies that never end: headers and a first chunk, then nothing.
	// Three of them take A's command slots; the other seven are refused at
	// once. The test waits for those seven answers, so it knows the three
	// are held before it sends A's next command (sending it sooner races
	// the stalled bodies for A's slots, and a command that wins one leaves
	// a stalled body refused and a slot free).
	host := strings.TrimPrefix(base, "http://")
	const stalled, slots = 10, 3
	refusedBodies := make(chan string, stalled)
	for range stalled {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/orders HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
			"Transfer-Encoding: chunked\r\n\r\n9\r\n{\"order_\r\n", host, tokA)
		go func() {
			c.SetReadDeadline(time.Now().Add(20 * time.Second)) //nolint:errcheck
			if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				refusedBodies <- strings.TrimSpace(line)
			}
		}()
	}
	for i := range stalled - slots {
		select {
		case line := <-refusedBodies:
			if !strings.Contains(line, " 429 ") {
				t.Fatalf("a stalled body beyond A's command slots: %q, want 429", line)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of A's stalled bodies refused, want %d (the rest hold A's %d command slots)", i, stalled-slots, slots)
		}
	}
	a := create(tokA, "a-1")
	if a.status != http.StatusTooManyRequests || a.code != "rate_limited" {
		t.Fatalf("A's command while its bodies trickle: %d %s, want 429 rate_limited (its own limit, not the shared cap)", a.status, a.body)
	}
	for i := range 5 {
		if b := create(tokB, fmt.Sprintf("b-%d", i+1)); b.status != http.StatusCreated {
			t.Fatalf("B's command while A's bodies trickle: %d %s", b.status, b.body)
		} else {
			json.Unmarshal([]byte(b.body), &last) //nolint:errcheck
		}
	}

	// Forged tokens with the longest wait, as many as the shared cap, at
	// once: those within A's query limit are refused as forged, the others
	// as beyond the limit; none is held.
	forged := event.Position{Major: 1 << 50}.Token()
	var wg sync.WaitGroup
	answers := make(chan answer, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers <- send(http.MethodGet, "/v1/orders?wait=10s", tokA, "", "X-Consistency-Token", forged)
		}()
	}
	for range 5 {
		if b := send(http.MethodGet, "/v1/orders/b-1?wait=10s", tokB, "", "X-Consistency-Token", last.Position); b.status != http.StatusOK {
			t.Errorf("B's read-your-writes query beside A's forged tokens: %d %s", b.status, b.body)
		}
	}
	wg.Wait()
	close(answers)
	refused := 0
	for a := range answers {
		switch {
		case a.status == http.StatusBadRequest && a.code == "invalid_request":
			refused++
		case a.status == http.StatusTooManyRequests && a.code == "rate_limited":
		default:
			t.Errorf("forged token: %d %s, want 400 invalid_request (or 429 beyond A's query limit)", a.status, a.body)
		}
		if a.took > 5*time.Second {
			t.Errorf("a forged token was held for %s", a.took)
		}
	}
	if refused == 0 {
		t.Error("no forged token was refused as forged")
	}
	if b := send(http.MethodGet, "/v1/orders?"+url.Values{"limit": {"5"}}.Encode(), tokB, ""); b.status != http.StatusOK {
		t.Errorf("B's list at the end: %d %s", b.status, b.body)
	}
}
