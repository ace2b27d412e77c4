package pgsession

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
)

// TestCheckpointLiveKnowsEveryRunnerFamily: a checkpoint is live while a
// session holds its lease in any runner family (the projections', the
// relay's: the relay's was missed, issue 29), whatever the key's sign;
// the same name's lock in another family (a retention job's) or another
// name's lease is not its.
func TestCheckpointLiveKnowsEveryRunnerFamily(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Close(c) })
		return c
	}
	holder, reader := connect(), connect()
	live := func(name string, want bool) {
		t.Helper()
		got, err := CheckpointLive(ctx, reader, name)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("CheckpointLive(%q) = %v, want %v", name, got, want)
		}
	}
	// Names whose keys are negative and positive in each family.
	var names []string
	for _, l := range RunnerLeases {
		var neg, pos bool
		for i := 0; !(neg && pos); i++ {
			n := l.Namespace + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
			if k := l.Key(n); k < 0 && !neg || k >= 0 && !pos {
				neg, pos = neg || k < 0, pos || k >= 0
				names = append(names, n)
				live(n, false)
				ok, err := l.Try(ctx, holder, n)
				if err != nil || !ok {
					t.Fatalf("take %s's lease of %s: %v %v", l.Namespace, n, ok, err)
				}
				live(n, true)
			}
		}
	}
	other := Lease{Class: 0x53545254, Namespace: "strata-retention"}
	if ok, err := other.Try(ctx, holder, "elsewhere"); err != nil || !ok {
		t.Fatal(err)
	}
	live("elsewhere", false)
	live("nobody", false)
	for _, n := range names {
		for _, l := range RunnerLeases {
			l.Release(holder, n)
		}
		live(n, false)
	}
}
