package paysim_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/strata-es/strata/internal/paysim"
)

func post(t *testing.T, url, key, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1 // dropped
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The same seed gives the same answers to the same requests, whatever else
// happened: faults are drawn per key and attempt.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	f := paysim.Faults{FailRate: 0.3, DropRate: 0.3, DeclineRate: 0.3}
	answers := func(order []int) map[string][]int {
		sim := paysim.Start(paysim.Config{Seed: 9, Faults: f})
		defer sim.Close()
		out := map[string][]int{}
		for _, i := range order {
			key := fmt.Sprintf("k-%d", i)
			for range 3 {
				out[key] = append(out[key], post(t, sim.URL()+"/v1/captures", key, fmt.Sprintf(`{"order_id":"o-%d","amount":5,"currency":"EUR"}`, i)))
			}
		}
		return out
	}
	a, b := answers([]int{1, 2, 3, 4, 5, 6}), answers([]int{6, 5, 4, 3, 2, 1})
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("answers depend on the order of keys:\n%v\n%v", a, b)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	sim := paysim.Start(paysim.Config{})
	defer sim.Close()
	for name, tc := range map[string]struct{ key, body string }{
		"no key":        {"", `{"order_id":"o","amount":1,"currency":"EUR"}`},
		"no order":      {"k", `{"amount":1,"currency":"EUR"}`},
		"unknown field": {"k", `{"order_id":"o","amount":1,"currency":"EUR","x":1}`},
		"not JSON":      {"k", `nope`},
	} {
		if got := post(t, sim.URL()+"/v1/captures", tc.key, tc.body); got != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, got)
		}
	}
	if n := len(sim.Ledger().Entries); n != 0 {
		t.Errorf("bad requests left %d entries", n)
	}
}
