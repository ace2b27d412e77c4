package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"
)

// ledgerVerdict is what `strata replay verify --json` reported.
type ledgerVerdict struct {
	Complete bool `json:"complete"`
	Verdicts []struct {
		Projection string `json:"projection"`
		Tenant     string `json:"tenant"`
		Complete   bool   `json:"complete"`
		Problem    string `json:"problem"`
		Missing    int64  `json:"missing_events"`
		After      string `json:"after"`
		Event      *struct {
			ID       string `json:"id"`
			Stream   string `json:"stream"`
			Version  int64  `json:"version"`
			Position string `json:"position"`
		} `json:"event"`
	} `json:"verdicts"`
	TookMS int64 `json:"took_ms"`
}

// verifyLedgers runs the binary under test's `replay verify` on the
// scenario's database, after the load and every fault: each projection's
// completeness ledger (committed with its checkpoints) must agree with the
// log. It is a second, independent witness beside the rebuild comparison:
// a skipped event is named here.
func (e *env) verifyLedgers(ctx context.Context, r *Result, url, name string) error {
	return e.verifyLedgersOf(ctx, r, url, name, "")
}

// verifyLedgersOf is verifyLedgers with the criterion's name prefixed by
// the database it judges (MOVE judges two).
func (e *env) verifyLedgersOf(ctx context.Context, r *Result, url, name, label string) error {
	vctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(vctx, e.cfg.Strata, "replay", "verify", "--json")
	cmd.Env = e.strataEnv(url, filepath.Join(e.dir, name+"-verify"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 5) {
		return fmt.Errorf("strata replay verify: %w\n%s", err, errb.String())
	}
	var v ledgerVerdict
	if jerr := json.Unmarshal(out.Bytes(), &v); jerr != nil {
		return fmt.Errorf("strata replay verify --json: %w\n%s", jerr, out.String())
	}
	bad := 0
	for _, x := range v.Verdicts {
		if x.Complete {
			continue
		}
		bad++
		if bad <= 5 {
			ev := ""
			if x.Event != nil {
				ev = fmt.Sprintf(" event %s (%s v%d, position %s)", x.Event.ID, x.Event.Stream, x.Event.Version, x.Event.Position)
			}
			r.note("LEDGER: %s tenant %s: %s%s (%d events) after %s", x.Projection, x.Tenant, x.Problem, ev, x.Missing, x.After)
		}
	}
	r.check(label+"replay verify: every projection's ledger agrees with the log", "all complete",
		fmt.Sprintf("%d/%d complete (%d ms)", len(v.Verdicts)-bad, len(v.Verdicts), v.TookMS), v.Complete && bad == 0 && len(v.Verdicts) > 0)
	return nil
}
