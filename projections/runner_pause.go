package projections

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgsession"
)

// errYield: a tool asked for the projection; the runner gives its lease
// back and waits until the tool is done.
var errYield = fmt.Errorf("a replay operation asked for the projection: %w", pgsession.ErrYield)

// pauseRetry is how often a paused runner looks whether the tool is done.
const pauseRetry = 100 * time.Millisecond

type waitResult int

const (
	waitDone waitResult = iota
	waitStopped
	waitYield
)

// wait sleeps d (after a failed batch), looking every poll interval
// whether a tool asked for the projection, which a failing runner must not
// hold up.
func (r *Runner) wait(ctx context.Context, conn *pgx.Conn, d time.Duration) waitResult {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return waitDone
		}
		if !pgsession.Sleep(ctx, min(left, r.cfg.PollInterval)) {
			return waitStopped
		}
		if paused, err := pauseRequested(ctx, conn, r.key); err == nil && paused {
			return waitYield
		}
	}
}
