package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCommandRefusesBadInput: `strata bench` answers a flag it does not
// know with its usage (exit 2) and a workload it does not know by name
// with the list it has (exit 1), before it starts any PostgreSQL.
func TestCommandRefusesBadInput(t *testing.T) {
	var out, errs bytes.Buffer
	if code := Command(context.Background(), []string{"--nope"}, &out, &errs); code != exitUsage || !strings.Contains(errs.String(), "-workloads") {
		t.Errorf("--nope: exit %d, stderr %q; want 2 and the usage", code, errs.String())
	}
	errs.Reset()
	if code := Command(context.Background(), []string{"--workloads", "append,warp"}, &out, &errs); code != exitFailure ||
		!strings.Contains(errs.String(), `unknown workload "warp"`) || !strings.Contains(errs.String(), "append") {
		t.Errorf("--workloads append,warp: exit %d, stderr %q; want 1 naming warp and the workloads", code, errs.String())
	}
}
