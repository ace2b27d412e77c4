package cli

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/internal/pgtest"
)

// TestProjectionPartitionsSetting: STRATA_PROJECTION_PARTITIONS names
// Partitionable projections with a power of two from 2 to 16; anything
// else is refused with an error that says what is wrong.
func TestProjectionPartitionsSetting(t *testing.T) {
	ps := examples.All().Projections()
	read := func(v string) (map[string]int, error) {
		return projectionPartitions(newEnv(func(name string) string {
			if name == "STRATA_PROJECTION_PARTITIONS" {
				return v
			}
			return ""
		}, examples.All()), ps)
	}
	got, err := read(" order_details=2, order_list=16 ")
	if err != nil || len(got) != 2 || got["order_details"] != 2 || got["order_list"] != 16 {
		t.Fatalf("order_details=2,order_list=16: %v, %v", got, err)
	}
	if got, err := read(""); err != nil || len(got) != 0 {
		t.Fatalf("unset: %v, %v", got, err)
	}
	for v, want := range map[string]string{
		"order_details":                   "want projection=count",
		"order_details=two":               "want projection=count",
		"order_details=3":                 "power of two",
		"order_details=1":                 "power of two",
		"order_details=32":                "power of two",
		"nope=2":                          `no projection "nope"`,
		"order_details=2,order_details=4": "listed twice",
		"customer_summary=2":              "does not declare itself Partitionable",
	} {
		_, err := read(v)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", v, err, want)
		}
	}
}

// TestServePartitionsNeedThePartitionLog: serve refuses partitioned
// projections on a log without the partition log and says what to run;
// `strata migrate partition-log` adds it once (a second run has nothing to
// do), and serve then runs the partitions.
func TestServePartitionsNeedThePartitionLog(t *testing.T) {
	url := pgtest.NewDatabase(t)
	vars := map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(), "STRATA_PROJECTION_PARTITIONS": "order_details=2"}
	cli := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, testEnv(vars), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := cli("migrate", "up"); code != exitOK {
		t.Fatalf("migrate up: %s", errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, testEnv(vars), &out, &errOut); code == exitOK ||
		!strings.Contains(errOut.String(), "strata migrate partition-log") {
		t.Fatalf("serve with partitions and no partition log: exit %d\n%s", code, errOut.String())
	}
	if code, out, errOut := cli("migrate", "partition-log"); code != exitOK || !strings.Contains(out, "placement pool: partition log added") {
		t.Fatalf("migrate partition-log: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("migrate", "partition-log"); code != exitOK || !strings.Contains(out, "placement pool: partition log present") {
		t.Fatalf("migrate partition-log again: %d %s %s", code, out, errOut)
	}
	base, _, stop := startServe(t, vars)
	defer stop()
	waitReady(t, base)
	status, raw, _ := apiCall(t, nil, base, "", http.MethodGet, "/readyz", "")
	if status != http.StatusOK {
		t.Fatalf("readyz with partitions: %d %s", status, raw)
	}
}
