package payhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/examples/fulfilment/fulfilcmd/payhttp"
	"github.com/strata-es/strata/internal/paysim"
)

// setup starts a simulator with faults and a client of it over real HTTP on
// loopback.
func setup(t *testing.T, f paysim.Faults, timeout time.Duration) (*paysim.Server, *payhttp.Client) {
	t.Helper()
	sim := paysim.Start(paysim.Config{Seed: 42, Faults: f})
	t.Cleanup(sim.Close)
	c, err := payhttp.New(payhttp.Config{URL: sim.URL(), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return sim, c
}

type class string

const (
	classOK          class = "ok"
	classRejected    class = "rejected"
	classUnavailable class = "retryable"
	classOther       class = "other"
)

func classify(err error) class {
	var r *process.Rejected
	switch {
	case err == nil:
		return classOK
	case errors.As(err, &r):
		if !process.IsDefinite(err) {
			return classOther
		}
		return classRejected
	case errors.Is(err, payhttp.ErrUnavailable):
		return classUnavailable
	}
	return classOther
}

// Every fault gives the adapter's expected error class, and after retries
// with the same key (the fault lifted) the ledger has exactly one capture.
func TestCaptureFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		faults    paysim.Faults
		timeout   time.Duration
		first     class
		recorded  bool // the first attempt's capture is in the ledger
		racy      bool // it may be or not: the provider goes on after the client gave up
		retryWins bool // after lifting the fault, the same key captures
	}{
		{name: "no fault", first: classOK, recorded: true, retryWins: true},
		{name: "slow, within the timeout", faults: paysim.Faults{Delay: 50 * time.Millisecond}, timeout: time.Second, first: classOK, recorded: true, retryWins: true},
		{name: "slow, past the timeout", faults: paysim.Faults{Delay: 2 * time.Second}, timeout: 100 * time.Millisecond, first: classUnavailable, racy: true, retryWins: true},
		{name: "5xx", faults: paysim.Faults{FailRate: 1}, first: classUnavailable, retryWins: true},
		{name: "held past the client's timeout", faults: paysim.Faults{TimeoutRate: 1, Hold: 10 * time.Second}, timeout: 100 * time.Millisecond, first: classUnavailable, retryWins: true},
		{name: "held, then 504 within the timeout", faults: paysim.Faults{TimeoutRate: 1, Hold: 10 * time.Millisecond}, timeout: time.Second, first: classUnavailable, retryWins: true},
		{name: "succeed, then drop the response", faults: paysim.Faults{DropRate: 1}, first: classUnavailable, recorded: true, retryWins: true},
		{name: "declined by rate", faults: paysim.Faults{DeclineRate: 1}, first: classRejected},
		{name: "declined by order", faults: paysim.Faults{DeclineOrders: []string{"o-1"}}, first: classRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			sim, c := setup(t, tt.faults, timeout)
			ctx := context.Background()
			start := time.Now()
			first, err := c.Capture(ctx, "k-1", "o-1", 1500, "EUR")
			if got := classify(err); got != tt.first {
				t.Fatalf("first attempt: %v (%s), want %s", err, got, tt.first)
			}
			if el := time.Since(start); el > timeout+time.Second {
				t.Errorf("the call took %v, past its timeout %v", el, timeout)
			}
			if got := sim.Ledger().Captures("o-1"); !tt.racy && got != map[bool]int{true: 1, false: 0}[tt.recorded] {
				t.Errorf("after the first attempt the ledger has %d capture(s), recorded %v", got, tt.recorded)
			}
			// The runtime retries with the same key; lift transient faults
			// but keep declines (the same key gets the same answer).
			sim.SetFaults(paysim.Faults{DeclineRate: tt.faults.DeclineRate, DeclineOrders: tt.faults.DeclineOrders})
			again, err := c.Capture(ctx, "k-1", "o-1", 1500, "EUR")
			l := sim.Ledger()
			if !tt.retryWins {
				if classify(err) != classRejected {
					t.Fatalf("retry of a decline: %v, want rejected", err)
				}
				if l.Captures("o-1") != 0 || l.Kept("o-1") != 0 {
					t.Errorf("a declined key has captures: %+v", l)
				}
				return
			}
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if first.CaptureID != "" && first.CaptureID != again.CaptureID {
				t.Errorf("same key, capture IDs %s then %s", first.CaptureID, again.CaptureID)
			}
			if l.Captures("o-1") != 1 || l.Kept("o-1") != 1 {
				t.Errorf("after retries: %d capture entries, %d kept, want exactly one: %+v", l.Captures("o-1"), l.Kept("o-1"), l.Entries)
			}
		})
	}
}

// Under every fault at once, a client retrying each key until it gets a
// definite answer leaves exactly one capture per captured order and none
// per declined one.
func TestCaptureRetriesUnderMixedFaults(t *testing.T) {
	t.Parallel()
	sim, c := setup(t, paysim.Faults{FailRate: 0.2, TimeoutRate: 0.1, Hold: 2 * time.Second, DropRate: 0.3, DeclineRate: 0.2},
		150*time.Millisecond)
	ctx := context.Background()
	outcome := map[string]class{}
	for i := range 40 {
		order := fmt.Sprintf("o-%d", i)
		key := "k-" + order
		for attempt := 0; ; attempt++ {
			_, err := c.Capture(ctx, key, order, int64(100+i), "EUR")
			cl := classify(err)
			if cl == classUnavailable && attempt < 50 {
				continue
			}
			if cl != classOK && cl != classRejected {
				t.Fatalf("%s: %v", order, err)
			}
			outcome[order] = cl
			break
		}
	}
	l := sim.Ledger()
	if l.Faults == 0 {
		t.Fatal("no fault was injected")
	}
	for order, cl := range outcome {
		want := map[class]int{classOK: 1, classRejected: 0}[cl]
		if got := l.Captures(order); got != want || l.Kept(order) != want {
			t.Errorf("%s ended %s with %d capture entries (%d kept), want %d", order, cl, got, l.Kept(order), want)
		}
	}
}

// Concurrent calls with one key (a re-dispatch racing the first attempt)
// capture once.
func TestCaptureConcurrentSameKey(t *testing.T) {
	t.Parallel()
	sim, c := setup(t, paysim.Faults{DropRate: 0.5, FailRate: 0.2}, time.Second)
	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := c.Capture(context.Background(), "k-1", "o-1", 100, "EUR")
				if err == nil {
					ids[i] = got.CaptureID
					return
				}
				if classify(err) != classUnavailable {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("capture IDs differ: %v", ids)
		}
	}
	if l := sim.Ledger(); l.Captures("o-1") != 1 {
		t.Errorf("%d captures, want 1", l.Captures("o-1"))
	}
}

func TestVoid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("before the capture: the key is tombstoned and a later capture refused", func(t *testing.T) {
		t.Parallel()
		sim, c := setup(t, paysim.Faults{}, time.Second)
		v, err := c.Void(ctx, "k-1")
		if err != nil || v.Status != paysim.StatusTombstoned {
			t.Fatalf("void: %+v, %v", v, err)
		}
		if _, err := c.Capture(ctx, "k-1", "o-1", 100, "EUR"); classify(err) != classRejected {
			t.Fatalf("capture after void: %v, want rejected", err)
		}
		if l := sim.Ledger(); l.Captures("o-1") != 0 || l.Kept("o-1") != 0 {
			t.Errorf("ledger: %+v", l)
		}
	})
	t.Run("after the capture: reversed, nothing kept", func(t *testing.T) {
		t.Parallel()
		sim, c := setup(t, paysim.Faults{}, time.Second)
		if _, err := c.Capture(ctx, "k-1", "o-1", 100, "EUR"); err != nil {
			t.Fatal(err)
		}
		for range 2 { // voiding again answers the same
			v, err := c.Void(ctx, "k-1")
			if err != nil || v.Status != paysim.StatusReversed || v.CaptureID == "" {
				t.Fatalf("void: %+v, %v", v, err)
			}
		}
		if _, err := c.Capture(ctx, "k-1", "o-1", 100, "EUR"); classify(err) != classRejected {
			t.Fatalf("capture after void: %v, want rejected", err)
		}
		l := sim.Ledger()
		if l.Captures("o-1") != 1 || l.Kept("o-1") != 0 {
			t.Errorf("ledger: %+v", l)
		}
		if n := len(l.Entries); n != 2 {
			t.Errorf("%d entries, want a capture and one void: %+v", n, l.Entries)
		}
	})
	t.Run("dropped void: retryable, applied once", func(t *testing.T) {
		t.Parallel()
		sim, c := setup(t, paysim.Faults{DropRate: 1}, time.Second)
		if _, err := c.Void(ctx, "k-1"); classify(err) != classUnavailable {
			t.Fatalf("dropped void: %v, want retryable", err)
		}
		sim.SetFaults(paysim.Faults{})
		if v, err := c.Void(ctx, "k-1"); err != nil || v.Status != paysim.StatusTombstoned {
			t.Fatalf("void again: %+v, %v", v, err)
		}
		if n := len(sim.Ledger().Entries); n != 1 {
			t.Errorf("%d entries, want 1", n)
		}
	})
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, c := setup(t, paysim.Faults{}, time.Second)
	if _, err := c.Capture(ctx, "k-1", "o-1", 100, "EUR"); err != nil {
		t.Fatal(err)
	}
	// The same key for another capture is a bug: not a decline, not retryable.
	if _, err := c.Capture(ctx, "k-1", "o-1", 999, "EUR"); classify(err) != classOther {
		t.Errorf("key reused for another amount: %v, want a plain error", err)
	}
	// No server: retryable.
	sim := paysim.Start(paysim.Config{})
	url := sim.URL()
	sim.Close()
	gone, err := payhttp.New(payhttp.Config{URL: url, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gone.Capture(ctx, "k", "o", 1, "EUR"); classify(err) != classUnavailable {
		t.Errorf("connection refused: %v, want retryable", err)
	}
	for _, bad := range []string{"", "ftp://x", "http://", "http://user:secret@host"} {
		if _, err := payhttp.New(payhttp.Config{URL: bad}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		} else if bad != "" && strings.Contains(err.Error(), "secret") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
}

// The port: the tenant is part of the provider's key; a void names the
// capture's step key.
func TestPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim, c := setup(t, paysim.Faults{}, time.Second)
	captureKey := process.StepKey("fulfilment", "o-1", "capture")
	payload, _ := json.Marshal(payhttp.Request{Op: payhttp.OpCapture, OrderID: "o-1", Amount: 700, Currency: "EUR"})
	for _, tenant := range []domain.TenantID{"t-a", "t-b"} {
		res, err := c.Execute(ctx, tenant, captureKey, payload)
		if err != nil {
			t.Fatal(err)
		}
		var cap payhttp.Capture
		if err := json.Unmarshal(res, &cap); err != nil || cap.CaptureID == "" {
			t.Fatalf("capture result %s: %v", res, err)
		}
	}
	if n := sim.Ledger().Captures("o-1"); n != 2 {
		t.Errorf("two tenants' order o-1: %d captures, want 2 (one each)", n)
	}
	void, _ := json.Marshal(payhttp.Request{Op: payhttp.OpVoid, OrderID: "o-1", CaptureKey: captureKey})
	if _, err := c.Execute(ctx, "t-a", process.StepKey("fulfilment", "o-1", "void"), void); err != nil {
		t.Fatal(err)
	}
	l := sim.Ledger()
	if l.Kept("o-1") != 1 {
		t.Errorf("after t-a's void, %d captures kept, want t-b's only: %+v", l.Kept("o-1"), l.Keys)
	}
	for _, k := range l.Keys {
		if k.Key == payhttp.ProviderKey("t-a", captureKey) && k.Status != paysim.StatusReversed {
			t.Errorf("t-a's capture is %s, want reversed", k.Status)
		}
	}
	if _, err := c.Execute(ctx, "t-a", "k", json.RawMessage(`{"op":"refund"}`)); err == nil {
		t.Error("unknown op accepted")
	}
	if _, err := c.Execute(ctx, "t-a", "k", json.RawMessage(`{"op":"capture","extra":1}`)); err == nil {
		t.Error("unknown field accepted")
	}
}

// GET /v1/ledger serves what Ledger returns.
func TestLedgerRoute(t *testing.T) {
	t.Parallel()
	sim, c := setup(t, paysim.Faults{DeclineOrders: []string{"o-2"}}, time.Second)
	ctx := context.Background()
	c.Capture(ctx, "k-1", "o-1", 100, "EUR")
	c.Capture(ctx, "k-2", "o-2", 100, "EUR")
	c.Void(ctx, "k-3")
	resp, err := http.Get(sim.URL() + "/v1/ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got paysim.Ledger
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := sim.Ledger()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /v1/ledger:\n%+v\nwant\n%+v", got, want)
	}
	kinds := []string{}
	for _, e := range got.Entries {
		kinds = append(kinds, e.Kind)
	}
	if fmt.Sprint(kinds) != "[capture decline void]" {
		t.Errorf("entries %v", kinds)
	}
}
