package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPU measures what a stretch of work costs in CPU time, split between a
// PostgreSQL cluster and this process. Wall-clock throughput depends on
// what else runs on the machine; the CPU spent is a steadier measure of
// the work itself.
type CPU struct {
	t              testing.TB
	dataDir        string
	postgres, self time.Duration
}

// StartCPU starts measuring; dataDir is the cluster's data directory.
func StartCPU(t testing.TB, dataDir string) *CPU {
	c := &CPU{t: t, dataDir: dataDir}
	c.postgres, c.self = clusterCPU(t, dataDir), processCPU()
	return c
}

// Log logs the CPU spent since StartCPU per event, and the rate that would
// allow on this machine's cores if nothing else ran.
func (c *CPU) Log(events int) {
	c.t.Helper()
	pg, self := clusterCPU(c.t, c.dataDir)-c.postgres, processCPU()-c.self
	perEvent := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(max(events, 1)) }
	c.t.Logf("CPU: PostgreSQL %s (%.1f us/event), strata %s (%.1f us/event); on %d otherwise idle cores that is at most %.0f events/s",
		pg.Round(time.Millisecond), perEvent(pg), self.Round(time.Millisecond), perEvent(self),
		runtime.NumCPU(), float64(runtime.NumCPU())*1e6/(perEvent(pg)+perEvent(self)))
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clusterCPU is the CPU time used so far by a PostgreSQL cluster: its
// postmaster (including the backends it has reaped) and its live children,
// from /proc (Linux; 0 elsewhere).
func clusterCPU(t testing.TB, dataDir string) time.Duration {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Logf("no CPU figures: %v", err)
		return 0
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		return 0
	}
	const ticks = 100 // USER_HZ
	stat := func(pid int) []string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
	}
	num := func(f []string, field int) int64 { // field as numbered in proc(5)
		n, _ := strconv.ParseInt(f[field-3], 10, 64)
		return n
	}
	var total int64
	if f := stat(postmaster); f != nil {
		total += num(f, 14) + num(f, 15) + num(f, 16) + num(f, 17)
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if f := stat(pid); f != nil && num(f, 4) == int64(postmaster) {
			total += num(f, 14) + num(f, 15)
		}
	}
	return time.Duration(total) * time.Second / ticks
}
