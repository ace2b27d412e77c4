package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// goroutineProfile is a process's goroutine profile (pprof debug=1): the
// goroutines grouped by stack.
type goroutineProfile struct {
	total  int
	idle   int            // HTTP connections waiting for a request
	stacks map[string]int // function names, innermost first, ";"-joined
	raw    []byte
}

func fetchGoroutines(ctx context.Context, client *http.Client, url string) (goroutineProfile, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	res, err := client.Do(req)
	if err != nil {
		return goroutineProfile{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return goroutineProfile{}, err
	}
	if res.StatusCode != http.StatusOK {
		return goroutineProfile{}, fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	return parseGoroutines(raw)
}

// parseGoroutines reads the debug=1 text format:
//
//	goroutine profile: total 37
//	5 @ 0x43e4ee 0x44f0f8 ...
//	#	0x4776e4	internal/poll.runtime_pollWait+0x84	/usr/local/go/src/runtime/netpoll.go:343
//	...
//
// A group is an idle connection when it runs net/http's conn.serve but
// no handler (serverHandler.ServeHTTP): it waits for a request's headers.
func parseGoroutines(raw []byte) (goroutineProfile, error) {
	p := goroutineProfile{stacks: map[string]int{}, raw: raw}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	n := 0
	var funcs []string
	flush := func() {
		if n == 0 {
			return
		}
		key := strings.Join(funcs, ";")
		p.stacks[key] += n
		if isIdle(key) {
			p.idle += n
		}
		n, funcs = 0, nil
	}
	sawHeader := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "goroutine profile: total "):
			t, err := strconv.Atoi(strings.TrimPrefix(line, "goroutine profile: total "))
			if err != nil {
				return p, fmt.Errorf("goroutine profile header %q", line)
			}
			p.total, sawHeader = t, true
		case strings.HasPrefix(line, "#"):
			f := strings.Fields(line)
			if len(f) >= 3 && n > 0 {
				fn := f[2]
				if i := strings.LastIndex(fn, "+0x"); i > 0 {
					fn = fn[:i]
				}
				funcs = append(funcs, fn)
			}
		case line == "":
			flush()
		default:
			if c, _, ok := strings.Cut(line, " @ "); ok {
				flush()
				if v, err := strconv.Atoi(c); err == nil {
					n = v
				}
			}
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return p, err
	}
	if !sawHeader {
		return p, fmt.Errorf("not a goroutine profile (debug=1)")
	}
	return p, nil
}

// stackGrowth is a stack whose goroutines grew between two snapshots.
type stackGrowth struct {
	Stack      string
	Before, At int
}

// diffGoroutines lists the stacks whose goroutines changed from before to
// after (both summed over the processes), most grown first, most shrunk
// last, idle connections left out.
func diffGoroutines(before, after []goroutineProfile) []stackGrowth {
	sum := func(ps []goroutineProfile) map[string]int {
		m := map[string]int{}
		for _, p := range ps {
			for k, v := range p.stacks {
				m[k] += v
			}
		}
		return m
	}
	b, a := sum(before), sum(after)
	var out []stackGrowth
	for k, v := range a {
		if isIdle(k) {
			continue
		}
		if v != b[k] {
			out = append(out, stackGrowth{Stack: k, Before: b[k], At: v})
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok && !isIdle(k) {
			out = append(out, stackGrowth{Stack: k, Before: v})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		di, dj := out[i].At-out[i].Before, out[j].At-out[j].Before
		if di != dj {
			return di > dj
		}
		return out[i].Stack < out[j].Stack
	})
	return out
}

// isIdle: an HTTP connection's goroutine outside any handler.
func isIdle(stack string) bool {
	return strings.Contains(stack, "net/http.(*conn).serve") && !strings.Contains(stack, "net/http.serverHandler.ServeHTTP")
}

// noteGoroutineDiff notes how the goroutine profiles changed from before
// the first fault to the end: the totals and the stacks that changed most
// (a lease that moved between processes shows as one stack shrinking and
// another growing).
func noteGoroutineDiff(r *Result, before, after []goroutineProfile) {
	if len(before) == 0 || len(after) == 0 {
		r.note("goroutine profiles: none to compare (%d before the first fault, %d at the end)", len(before), len(after))
		return
	}
	total := func(ps []goroutineProfile) int {
		n := 0
		for _, p := range ps {
			n += p.total - p.idle
		}
		return n
	}
	d := diffGoroutines(before, after)
	var grown, shrunk []string
	for _, g := range d {
		s := fmt.Sprintf("%d -> %d %s", g.Before, g.At, shortStack(g.Stack, 3))
		if g.At > g.Before && len(grown) < 4 {
			grown = append(grown, s)
		}
	}
	for i := len(d) - 1; i >= 0 && len(shrunk) < 4; i-- {
		if g := d[i]; g.At < g.Before {
			shrunk = append(shrunk, fmt.Sprintf("%d -> %d %s", g.Before, g.At, shortStack(g.Stack, 3)))
		}
	}
	r.note("goroutine profiles (all processes, idle connections left out): %d before the first fault, %d at the end; grown: %s; shrunk: %s",
		total(before), total(after), orNone(strings.Join(grown, "; ")), orNone(strings.Join(shrunk, "; ")))
}

// shortStack names a stack by its innermost frames outside the runtime.
func shortStack(key string, frames int) string {
	var keep []string
	for _, f := range strings.Split(key, ";") {
		if strings.HasPrefix(f, "runtime.") || strings.HasPrefix(f, "internal/poll.") || strings.HasPrefix(f, "sync.") {
			continue
		}
		keep = append(keep, f)
		if len(keep) == frames {
			break
		}
	}
	if len(keep) == 0 {
		return oneLine(strings.ReplaceAll(key, ";", " < "), 120)
	}
	return strings.Join(keep, " < ")
}

// snapshotGoroutines takes every running process's goroutine profile and
// stores it in the work directory as <prefix>-<process>-<pid>.txt.
func (run *soakRun) snapshotGoroutines(ctx context.Context, label string) []goroutineProfile {
	var out []goroutineProfile
	client := newHTTPClient(1)
	for i, url := range run.pprof {
		pid := run.s.sup.Pid(i)
		if pid == 0 {
			continue
		}
		p, err := fetchGoroutines(ctx, client, url)
		if err != nil {
			run.e.logf("R18: goroutine profile of %s: %v", run.s.sup.procs[i].spec.Name, err)
			continue
		}
		name := fmt.Sprintf("%s-goroutines-%s-%s-%d.txt", run.s.db, label, run.s.sup.procs[i].spec.Name, pid)
		_ = os.WriteFile(filepath.Join(run.e.dir, name), p.raw, 0o644)
		out = append(out, p)
	}
	return out
}
