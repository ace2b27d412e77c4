package replay_test

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/examples/orders/orderview"
	"github.com/strata-es/strata/internal/failpoint"
	"github.com/strata-es/strata/internal/testdb"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/replay"
)

const foldChildURLEnv = "STRATA_TEST_FOLD_CHILD_URL"

// TestRebuildFoldKilled kills `replay rebuild` processes with SIGKILL
// between writing a projection's folded rows (COPY, ledger, checkpoint)
// and committing them, before any projection's fold commits or after one
// did, so that runs resume shadows left at the
// start (folded again) and shadows whose fold committed (caught up, their
// deferred row-level security and indexes built, swapped) side by side.
// A last rebuild then finishes: every table equals a rebuild event by
// event, every ledger verifies, no shadow is left.
func TestRebuildFoldKilled(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 4*time.Minute)
	d := testdb.New(t, orderview.Migrations)
	seedSQL(ctx, t, d.AdminURL, genHistories(17, []string{"acme", "beta", "gamma"}, 900, time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)))
	b := newBundle(t, d)
	for _, p := range orderview.All() {
		if _, ok := p.(projections.Folder); !ok {
			t.Fatalf("%s does not fold: this test needs every projection of the orders module to", p.Name())
		}
	}
	kills := 0
	// Of the four folds: none commits, one, one, none (two are left for
	// the last rebuild).
	for _, hit := range []int{1, 2, 2, 1} {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRebuildFoldKillChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), foldChildURLEnv+"="+d.AdminURL,
			failpoint.EnvVar+"="+projections.FailpointFoldBeforeCommit+"="+strconv.Itoa(hit))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			kills++
		case err != nil:
			t.Fatalf("rebuild process %d failed: %v\n%s", hit, err, out)
		default:
			t.Fatalf("rebuild process %d finished without reaching its failpoint\n%s", hit, out)
		}
	}
	head := lastPosition(ctx, t, b)
	var res replay.Result
	var err error
	for { // the killed process's sessions hold their leases a moment longer
		res, err = b.svc.Rebuild(ctx, replay.RebuildOptions{})
		if !errors.Is(err, replay.ErrBusy) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the rebuild after %d kills: %v", kills, err)
	}
	// (A projection whose fold committed may have been swapped in before
	// the kill that ended its process: it is rebuilt anew here.)
	refolded := 0
	for _, r := range res.Projections {
		if r.Resumed && r.Folded > 0 {
			refolded++
		}
	}
	if refolded == 0 {
		t.Errorf("no shadow left at the start by a kill was folded again: %+v", res.Projections)
	}
	for _, p := range orderview.All() {
		want := dumpTables(ctx, t, d.AdminURL, freshRebuild(ctx, t, b, head, p))
		if got := dumpTables(ctx, t, d.AdminURL, liveTables(p)); got != want {
			t.Errorf("%s after %d killed rebuilds differs from a rebuild event by event:\n%s", p.Name(), kills, diffLines(want, got))
		}
	}
	verdicts, err := b.svc.Verify(ctx, replay.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range verdicts {
		if !v.Complete {
			t.Errorf("verify %s of %s: %+v", v.Projection, v.Tenant, v)
		}
	}
	// verify --deep builds its own shadow by applying the log (a fold is
	// never its comparison): the folded live rows must equal it.
	deep, err := b.svc.VerifyDeep(ctx, replay.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(deep) != len(orderview.All()) {
		t.Errorf("verify --deep gave %d verdicts", len(deep))
	}
	for _, v := range deep {
		if !v.Equal || v.Rows == 0 {
			t.Errorf("verify --deep of %s: %+v", v.Projection, v)
		}
	}
	assertNoShadowTables(ctx, t, d.AdminURL)
}

// TestRebuildFoldKillChild is a rebuild process of TestRebuildFoldKilled;
// run on its own it does nothing.
func TestRebuildFoldKillChild(t *testing.T) {
	url := os.Getenv(foldChildURLEnv)
	if url == "" {
		return
	}
	ctx := testCtx(t, time.Minute)
	pool, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	svc, err := replay.New(replay.Config{Registry: order.Registry, Pool: pool, Log: postgres.New(nil, pool), Projections: orderview.All(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := svc.Rebuild(ctx, replay.RebuildOptions{})
		if !errors.Is(err, replay.ErrBusy) {
			if err != nil {
				t.Error(err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
