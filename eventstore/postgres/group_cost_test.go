package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/storetest"
	"github.com/strata-es/strata/internal/testdb"
)

// TestGroupCost measures what an append costs in CPU, PostgreSQL's and
// the client's, with group commit off and on: on a machine shared with
// other work, throughput is noise, CPU time per append much less so. It
// runs only when STRATA_GROUP_COST names writer counts ("8,32");
// STRATA_GROUP_COST_CONFIGS lists the STRATA_GROUP_COMMIT settings
// compared (default "off on"), alternated three times, 1.5 s each, on a
// private cluster with fsync on (docs/benchmarks.md, "Group commit").
func TestGroupCost(t *testing.T) {
	counts := os.Getenv("STRATA_GROUP_COST")
	if counts == "" {
		t.Skip("set STRATA_GROUP_COST=8,32 to measure")
	}
	configs := strings.Fields(os.Getenv("STRATA_GROUP_COST_CONFIGS"))
	if len(configs) == 0 {
		configs = []string{"off", "on"}
	}
	priv := testdb.NewPrivate(t, map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "shared_buffers": "256MB"})
	for _, c := range strings.Split(counts, ",") {
		writers, err := strconv.Atoi(c)
		if err != nil {
			t.Fatal(err)
		}
		app, err := db.OpenPool(context.Background(), priv.AdminURL, db.PoolConfig{Role: db.RoleApp, MaxConns: int32(writers)})
		if err != nil {
			t.Fatal(err)
		}
		for rep := range 3 {
			for _, cfg := range configs {
				costRun(t, priv.Server.DataDir(), app, writers, cfg, fmt.Sprintf("%s-%d-%d", cfg, writers, rep))
			}
		}
		app.Close()
	}
}

func costRun(t *testing.T, dataDir string, app *pgxpool.Pool, writers int, setting, prefix string) {
	cfg, on, err := ParseGroupCommit(setting)
	if err != nil {
		t.Fatal(err)
	}
	spy := &groupSpy{}
	s := New(app, nil)
	if on {
		s = New(app, nil, WithGroupCommit(cfg), forced(0, spy, nil))
	}
	const d = 1500 * time.Millisecond
	pg0, self0 := serverCPU(t, dataDir), selfCPU()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var n, failed atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			version := map[int]int64{}
			var mine []time.Duration
			for i := 0; ctx.Err() == nil; i++ {
				k := i % 300
				t0 := time.Now()
				_, err := s.Append(ctx, eventstore.AppendRequest{Tenant: fmt.Sprintf("tenant-%d", k%4), Stream: fmt.Sprintf("%s-w%d-%d", prefix, w, k),
					Expected: eventstore.Exact(version[k]), Events: []eventstore.NewEvent{{ID: storetest.NewID(), Type: "order.line_added", SchemaVersion: 2,
						Data: []byte(`{"order_id":"7d9f1f5e-3a4b-4c2d-9e8f-0a1b2c3d4e5f","product_id":"SKU-10021","quantity":2,"unit_price":{"amount":49950,"currency":"EUR"},"at":"2026-11-29T20:00:00Z"}`)}}})
				switch {
				case err == nil:
					version[k]++
					n.Add(1)
					mine = append(mine, time.Since(t0))
				case ctx.Err() == nil:
					failed.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	pg1, self1 := serverCPU(t, dataDir), selfCPU()
	var pg float64
	for pid, c := range pg1 {
		pg += c - pg0[pid]
	}
	slices.Sort(lat)
	var p99 time.Duration
	if len(lat) > 0 {
		p99 = lat[len(lat)*99/100]
	}
	sizes, _ := spy.get()
	carried := 0
	for _, k := range sizes {
		carried += k
	}
	ops := float64(max(n.Load(), 1))
	t.Logf("writers=%2d %-24q %6.0f appends/s p99 %6.2f ms, %d failed; %d groups of %.1f on average; CPU per append: PostgreSQL %3.0f µs, client %3.0f µs",
		writers, setting, float64(n.Load())/d.Seconds(), float64(p99.Microseconds())/1000, failed.Load(), len(sizes), float64(carried)/float64(max(len(sizes), 1)),
		pg/ops*1e6, (self1-self0)/ops*1e6)
}

// serverCPU returns the CPU seconds used so far by the cluster's
// postmaster and each of its children, by pid.
func serverCPU(t *testing.T, dataDir string) map[int]float64 {
	b, err := os.ReadFile(dataDir + "/postmaster.pid")
	if err != nil {
		t.Fatal(err)
	}
	master, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	out := map[int]float64{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if ppid, _ := strconv.Atoi(f[1]); ppid != master && pid != master {
			continue
		}
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		out[pid] = (utime + stime) / 100 // clock ticks (USER_HZ)
	}
	return out
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
