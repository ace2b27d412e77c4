package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-es/strata/internal/pgtest"
)

// TestMeasureExportLoad is a measurement, not a check (issue 29, finding
// 13): how another tenant's query latency moves while 30 export jobs are
// asked for at once (10 each of three tenants with 1,000 orders). It runs
// only with STRATA_MEASURE_EXPORT_LOAD=1 and logs the numbers; what it
// asserts is that every start is answered 202 or 429 and that the accepted
// jobs finish. The cap itself is asserted, without timing, by
// TestExportJobsAreCappedPollsUnauditedAndExpire.
func TestMeasureExportLoad(t *testing.T) {
	if os.Getenv("STRATA_MEASURE_EXPORT_LOAD") == "" {
		t.Skip("a measurement: set STRATA_MEASURE_EXPORT_LOAD=1 to run it")
	}
	vars := directoryVars(t, pgtest.NewDatabase(t))
	vars["STRATA_RATE_COMMANDS"], vars["STRATA_RATE_QUERIES"] = "unlimited", "unlimited"
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	const orders, perTenant = 1000, 10
	bigs := []string{"big-0", "big-1", "big-2"}
	for _, tn := range append([]string{"quiet"}, bigs...) {
		provisionOver(t, base, tn)
		waitServed(t, base, tn)
	}
	if st, raw, _ := apiCall(t, nil, base, tenantToken(t, "quiet"), "POST", "/v1/orders", `{"order_id":"q-1","customer_id":"c-1","currency":"EUR"}`); st != 201 {
		t.Fatalf("quiet: %d %s", st, raw)
	}
	for _, tn := range bigs {
		var wg sync.WaitGroup
		tok := tenantToken(t, tn)
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < orders; i += 8 {
					id := "o-" + strconv.Itoa(i)
					if st, raw, _ := apiCall(t, nil, base, tok, "POST", "/v1/orders", `{"order_id":"`+id+`","customer_id":"c-1","currency":"EUR"}`); st != 201 {
						t.Errorf("%s %s: %d %s", tn, id, st, raw)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	quiet := tenantToken(t, "quiet")
	sample := func(stop <-chan struct{}, n int) []time.Duration {
		var out []time.Duration
		for i := 0; n == 0 || i < n; i++ {
			if stop != nil {
				select {
				case <-stop:
					return out
				default:
				}
			}
			start := time.Now()
			if st, _, _ := apiCall(t, nil, base, quiet, "GET", "/v1/orders/q-1", ""); st != 200 {
				t.Errorf("quiet's query: %d", st)
			}
			out = append(out, time.Since(start))
			time.Sleep(5 * time.Millisecond)
		}
		return out
	}
	report := func(what string, ds []time.Duration) {
		slices.Sort(ds)
		q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
		t.Logf("%s: %d queries, p50 %v, p99 %v, max %v", what, len(ds), q(0.5).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond))
	}
	report("quiet tenant, no export", sample(nil, 200))

	done := make(chan struct{})
	got := make(chan []time.Duration)
	go func() { got <- sample(done, 0) }()
	start := time.Now()
	var mu sync.Mutex
	var accepted []string
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for _, tn := range bigs {
		for range perTenant {
			wg.Go(func() {
				st, raw := platformCall(t, base, "POST", "/v1/platform/tenants/"+tn+"/exports", "")
				mu.Lock()
				defer mu.Unlock()
				statuses[st]++
				if st == http.StatusAccepted {
					var job struct{ ID string }
					_ = json.Unmarshal(raw, &job)
					accepted = append(accepted, tn+"/exports/"+job.ID)
				}
			})
		}
	}
	wg.Wait()
	for _, path := range accepted {
		waitUntil(t, 5*time.Minute, func() bool {
			_, raw := platformCall(t, base, "GET", "/v1/platform/tenants/"+path, "")
			var job struct{ Status string }
			_ = json.Unmarshal(raw, &job)
			return job.Status != "running"
		}, path+" ends")
	}
	took := time.Since(start)
	close(done)
	report(fmt.Sprintf("quiet tenant while %d exports were asked for (answers %v), until the accepted ones ended (%v)", len(bigs)*perTenant, statuses, took.Round(time.Millisecond)), <-got)
	if statuses[http.StatusAccepted]+statuses[http.StatusTooManyRequests] != len(bigs)*perTenant {
		t.Errorf("answers: %v", statuses)
	}
}
