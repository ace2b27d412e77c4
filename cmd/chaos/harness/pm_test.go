package harness

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-es/strata/internal/paysim"
)

func TestPM1Config(t *testing.T) {
	t.Parallel()
	if err := DefaultPM1().validate(); err != nil {
		t.Fatal(err)
	}
	bad := DefaultPM1()
	bad.SKUs = bad.ScarceSKUs
	if bad.validate() == nil {
		t.Fatal("accepted no plentiful SKU")
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p50, p99, mx := percentiles(ds)
	if p50 != 50*time.Millisecond || p99 != 99*time.Millisecond || mx != 100*time.Millisecond {
		t.Fatalf("percentiles = %s %s %s, want 50ms 99ms 100ms", p50, p99, mx)
	}
	if a, b, c := percentiles(nil); a != 0 || b != 0 || c != 0 {
		t.Fatal("percentiles of nothing are not zero")
	}
}

// TestPMOrders: unique IDs across tenants (paysim's Kept counts by order ID
// and its DeclineOrders names IDs), 1 to 3 distinct SKUs of the tenant's
// range, and the same draw for the same seed.
func TestPMOrders(t *testing.T) {
	t.Parallel()
	cfg := DefaultPM1()
	tenants := []string{"a", "b", "c"}
	orders := newPMOrders(rand.New(rand.NewPCG(1, 2)), cfg, tenants)
	again := newPMOrders(rand.New(rand.NewPCG(1, 2)), cfg, tenants)
	if len(orders) != cfg.OrdersPerTenant*len(tenants) {
		t.Fatalf("%d orders", len(orders))
	}
	ids := map[string]bool{}
	actions := map[string]int{}
	for i, o := range orders {
		if ids[o.id] {
			t.Fatalf("order ID %s twice", o.id)
		}
		ids[o.id] = true
		if n := len(o.lines); n < 1 || n > 3 {
			t.Fatalf("%s has %d lines", o.id, n)
		}
		for sku, q := range o.lines {
			if q < 1 || q > 3 || (sku < pmSKU(0) || sku > pmSKU(cfg.SKUs-1)) {
				t.Fatalf("%s: line %s x %d", o.id, sku, q)
			}
		}
		actions[o.action]++
		if again[i].id != o.id || len(again[i].lines) != len(o.lines) || again[i].action != o.action || again[i].delay != o.delay {
			t.Fatalf("order %d differs between two draws with one seed", i)
		}
	}
	if actions["cancel"] == 0 || actions["pay"] == 0 || actions[""] == 0 {
		t.Fatalf("actions %v", actions)
	}
}

// TestRecordedProvider: the recording handler sees a capture's 201, a
// replay, a dropped answer, and calls onCaptured after a 201 only.
func TestRecordedProvider(t *testing.T) {
	t.Parallel()
	p := startRecordedProvider(paysim.Config{Seed: 1})
	defer p.Close()
	var hooked atomic.Int32
	f := func(string) { hooked.Add(1) }
	p.onCaptured.Store(&f)
	capture := func(key string) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, p.URL()+"/v1/captures", bytes.NewReader([]byte(`{"order_id":"o1","amount":100,"currency":"EUR"}`)))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	if st, err := capture("t/k1"); err != nil || st != http.StatusCreated {
		t.Fatalf("capture: %d %v", st, err)
	}
	if st, err := capture("t/k1"); err != nil || st != http.StatusCreated {
		t.Fatalf("replay: %d %v", st, err)
	}
	p.sim.SetFaults(paysim.Faults{DropRate: 1})
	if _, err := capture("t/k2"); err == nil {
		t.Fatal("a dropped answer arrived")
	}
	// The dropped answer's call is recorded when its handler returns,
	// which can be after the client has seen the connection close.
	calls := p.Calls()
	for deadline := time.Now().Add(5 * time.Second); len(calls) < 3 && time.Now().Before(deadline); calls = p.Calls() {
		time.Sleep(5 * time.Millisecond)
	}
	if len(calls) != 3 || calls[0].Op != "capture" || calls[0].Key != "t/k1" || calls[0].Status != http.StatusCreated || calls[0].Dropped ||
		!calls[2].Dropped || calls[2].Key != "t/k2" {
		t.Fatalf("calls %+v", calls)
	}
	if n := hooked.Load(); n != 2 {
		t.Fatalf("onCaptured called %d times, want 2 (the dropped answer is not a 201 seen)", n)
	}
	if got := p.sim.Ledger().Kept("o1"); got != 2 {
		t.Fatalf("kept %d, want 2 (two keys)", got)
	}
}
