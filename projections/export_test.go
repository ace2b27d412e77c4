package projections

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Internals the external tests (package projections_test, which may import
// the orders module) need.

func (c *RunnerConfig) SetDefaults()  { c.setDefaults() }
func (p *FailurePolicy) SetDefaults() { p.setDefaults() }
func LeaseKey(name string) int32      { return leaseKey(name) }

const LeaseClass = leaseClass

// ScheduleRetry makes the runner retry tenant's stream at at.
func (r *Runner) ScheduleRetry(tenant, stream string, at time.Time) {
	r.retries[streamKey{tenant, stream}] = at
}

// RetryDue is retryDue; PendingRetries how many retries are scheduled.
func (r *Runner) RetryDue(ctx context.Context, conn *pgx.Conn, limit int) (int, error) {
	return r.retryDue(ctx, conn, limit)
}
func (r *Runner) PendingRetries() int { return len(r.retries) }
