package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/projections"
)

// The partitions workload (issue 35 §5): one projection's catch-up from
// the first event to the head of the seeded log, by projector processes
// of their own (`strata bench projector-child`, below), as serve runs it:
//
//   - one process, the projection whole (one runner);
//   - one process, the projection in 2 partitions (two runners, two
//     sessions, each reading its partition through the index by bucket);
//   - two processes sharing the 2 partitions (projections.Share).
//
// The ratio that matters is two processes against one process whole. With
// each variant it reports the CPU spent per event of the log by the
// projector processes (user + system, from their rusage) and by
// PostgreSQL (every backend's, from the postmaster's children's times in
// /proc): on a machine of 2 cores their sum over the elapsed time says
// which of them is the bottleneck.

// projectorChildArgs is the hidden mode `strata bench projector-child`.
const projectorChildArgs = "projector-child"

// partitionedProjection is the projection the workload splits: the
// heaviest one that is Partitionable.
const partitionedProjection = orderview.OrderDetailsName

type partitionVariant struct {
	label      string
	processes  int
	partitions int // 0: the projection whole
}

var partitionVariants = []partitionVariant{
	{"1 process, whole", 1, 0},
	{"1 process, 2 partitions", 1, 2},
	{"2 processes, 2 partitions", 2, 2},
}

// partitionRun is one variant's run.
type partitionRun struct {
	wall          time.Duration
	goCPU, pgCPU  time.Duration
	events        int
	childrenNames string
}

func benchPartitions(ctx context.Context, e *Env) ([]Result, error) {
	l, err := e.seedLog(ctx)
	if err != nil {
		return nil, err
	}
	// The log by partition, as `strata migrate partition-log` adds it (it
	// rewrites the events table: the workloads before this one ran without
	// it, as a deployment that partitions nothing does).
	began := time.Now()
	if _, err := db.EnablePartitionLog(ctx, l.url); err != nil {
		return nil, err
	}
	e.logf("partition log added in %s", time.Since(began).Round(time.Millisecond))
	runs := make([][]Run, len(partitionVariants))
	cpu := make([][2]time.Duration, len(partitionVariants)) // go, pg summed over runs
	walls := make([]time.Duration, len(partitionVariants))
	for i := 0; i < e.cfg.Runs; i++ {
		for v, pv := range partitionVariants {
			if err := resetReadSide(ctx, l.url); err != nil {
				return nil, err
			}
			r, err := e.partitionCatchUp(ctx, l, pv)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", pv.label, err)
			}
			runs[v] = append(runs[v], Run{Ops: int64(l.events), Seconds: r.wall.Seconds(), Throughput: float64(l.events) / r.wall.Seconds()})
			cpu[v][0] += r.goCPU
			cpu[v][1] += r.pgCPU
			walls[v] += r.wall
			e.logf("partitions %-26s run %d: %.0f events/s (%s; CPU per event: projector %.1f µs, PostgreSQL %.1f µs; %.2f cores busy)",
				pv.label, i+1, float64(l.events)/r.wall.Seconds(), r.wall.Round(time.Millisecond),
				perEvent(r.goCPU, l.events), perEvent(r.pgCPU, l.events), (r.goCPU+r.pgCPU).Seconds()/r.wall.Seconds())
		}
	}
	one, onePart, two := summarize(runs[0]), summarize(runs[1]), summarize(runs[2])
	cpuNote := func(v int) string {
		n := e.cfg.Runs * l.events
		return fmt.Sprintf("CPU per event: projector processes %.1f µs, PostgreSQL %.1f µs; %.2f of %s cores busy",
			perEvent(cpu[v][0], n), perEvent(cpu[v][1], n), (cpu[v][0]+cpu[v][1]).Seconds()/walls[v].Seconds(), machine()["cpus"])
	}
	return []Result{
		{Workload: "one projection's catch-up, 2 projector processes vs 1", Concurrency: 2, Unit: "events/s", Strata: two, Raw: &one,
			RawLabel: "one process running the projection whole", Ratio: ratioOf(two, one),
			Target: ">= 1.5x when PostgreSQL is not the bottleneck", Met: met(ratioOf(two, one) >= 1.5),
			Note: fmt.Sprintf("%s over %d events; 2 processes sharing 2 partitions: %s; whole: %s", partitionedProjection, l.events, cpuNote(2), cpuNote(0))},
		{Workload: "one projection's catch-up, 2 partitions in 1 process vs whole", Concurrency: 2, Unit: "events/s", Strata: onePart, Raw: &one,
			RawLabel: "one process running the projection whole", Ratio: ratioOf(onePart, one),
			Note: fmt.Sprintf("%s; 2 partitions in one process: %s", partitionedProjection, cpuNote(1))},
	}, nil
}

func perEvent(d time.Duration, events int) float64 {
	return float64(d.Microseconds()) / float64(max(events, 1))
}

// partitionCatchUp runs one variant: it starts its processes, lets them
// go together once each has counted the others, and waits for every one
// to see the projection at the head.
func (e *Env) partitionCatchUp(ctx context.Context, l *logDB, pv partitionVariant) (partitionRun, error) {
	var out partitionRun
	pgBefore, err := pgCPU(e.Server.DataDir())
	if err != nil {
		return out, err
	}
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		ready chan error
	}
	var children []*child
	defer func() {
		for _, c := range children {
			if c.cmd.ProcessState == nil {
				c.cmd.Process.Kill() //nolint:errcheck
				c.cmd.Wait()         //nolint:errcheck
			}
		}
	}()
	for range pv.processes {
		cmd := exec.CommandContext(ctx, e.cfg.StrataPath, "bench", projectorChildArgs,
			"--url", l.url, "--projection", partitionedProjection, "--partitions", strconv.Itoa(pv.partitions),
			"--processes", strconv.Itoa(pv.processes), "--head", l.head.Token())
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return out, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return out, err
		}
		if err := cmd.Start(); err != nil {
			return out, err
		}
		c := &child{cmd: cmd, stdin: stdin, ready: make(chan error, 1)}
		children = append(children, c)
		go func() {
			sc := bufio.NewScanner(stdout)
			if sc.Scan() && sc.Text() == "ready" {
				c.ready <- nil
			} else {
				c.ready <- errors.New("the projector process did not get ready")
			}
			io.Copy(io.Discard, stdout) //nolint:errcheck
		}()
	}
	for _, c := range children {
		select {
		case err := <-c.ready:
			if err != nil {
				return out, err
			}
		case <-time.After(30 * time.Second):
			return out, errors.New("the projector processes did not get ready within 30s")
		}
	}
	began := time.Now()
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return out, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(children))
	for i, c := range children {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.cmd.Wait() }()
	}
	wg.Wait()
	out.wall = time.Since(began)
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("projector process: %w", err)
	}
	for _, c := range children {
		out.goCPU += c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime()
	}
	time.Sleep(200 * time.Millisecond) // the postmaster reaps the backends of the exited processes
	pgAfter, err := pgCPU(e.Server.DataDir())
	if err != nil {
		return out, err
	}
	out.pgCPU = pgAfter - pgBefore
	out.events = l.events
	return out, nil
}

// pgCPU returns the CPU time spent so far by a PostgreSQL cluster's
// processes: the postmaster's own and its reaped children's (backends
// that have exited), and every live child's.
func pgCPU(dataDir string) (time.Duration, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL's CPU: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL's CPU: postmaster.pid: %w", err)
	}
	ticks := func(pid int, withChildren bool) (int64, int, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, 0, err
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 (state) on
		ppid, _ := strconv.Atoi(f[1])
		var t int64
		last := 13 // utime, stime: fields 14 and 15
		if withChildren {
			last = 15 // and cutime, cstime: 16 and 17
		}
		for i := 11; i <= last; i++ {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			t += v
		}
		return t, ppid, nil
	}
	total, _, err := ticks(pid, true)
	if err != nil {
		return 0, fmt.Errorf("PostgreSQL's CPU: %w", err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		child, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		t, ppid, err := ticks(child, false)
		if err == nil && ppid == pid {
			total += t
		}
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(total) * time.Second / hz, nil
}

// runProjectorChild is `strata bench projector-child`: one projector
// process of the partitions workload. It counts the members of its share
// until there are --processes, prints "ready", waits for a line on stdin,
// then runs the projection (whole, or its --partitions) until every one of
// its checkpoints has reached --head, and exits.
func runProjectorChild(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench "+projectorChildArgs, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "", "database URL (owner)")
	name := fs.String("projection", "", "projection")
	parts := fs.Int("partitions", 0, "partitions (0: the projection whole)")
	procs := fs.Int("processes", 1, "projector processes sharing the partitions")
	headToken := fs.String("head", "", "position to catch up to")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "projector-child:", err); return exitFailure }
	head, err := event.ParseToken(*headToken)
	if err != nil {
		return fail(err)
	}
	var p projections.Projection
	for _, q := range examples.All().Projections() {
		if q.Name() == *name {
			p = q
		}
	}
	if p == nil {
		return fail(fmt.Errorf("no projection %q", *name))
	}
	proj, err := db.OpenPool(ctx, *url, db.PoolConfig{Role: db.RoleProjector, MaxConns: int32(max(*parts, 1) + 3), AppName: "bench-projector"})
	if err != nil {
		return fail(err)
	}
	defer proj.Close()
	store := postgres.New(nil, proj)
	quiet := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	cfg := projections.RunnerConfig{Registry: examples.All().MustRegistry(), Logger: quiet, LeaseRetry: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond}
	var runners []*projections.Runner
	if *parts == 0 {
		r, err := projections.NewRunner(p, store, proj, cfg)
		if err != nil {
			return fail(err)
		}
		runners = append(runners, r)
	} else {
		share := projections.NewShare(proj, quiet)
		wg.Add(1)
		go func() { defer wg.Done(); share.Run(ctx) }()
		for deadline := time.Now().Add(20 * time.Second); share.Members() < *procs; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("%d of %d projector processes after 20s", share.Members(), *procs))
			}
		}
		cfg.Share = share
		for i := range *parts {
			cfg.Partition = eventstore.Partition{Index: i, Count: *parts}
			r, err := projections.NewRunner(p, store, proj, cfg)
			if err != nil {
				return fail(err)
			}
			runners = append(runners, r)
		}
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(fmt.Errorf("wait for the start: %w", err))
	}
	for _, r := range runners {
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(ctx) }() //nolint:errcheck // Run returns nil
	}
	if err := projections.NewConsistency(proj, nil).WaitFor(ctx, head, p.Name()); err != nil {
		return fail(err)
	}
	cancel()
	return exitOK
}
