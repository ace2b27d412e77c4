package tenancy

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgsession"
)

// BarrierConfig configures AwaitBarrier.
type BarrierConfig struct {
	Pool    *pgxpool.Pool // sends the notifications (the owner connection)
	Lease   time.Duration // a member whose heartbeat is older is gone (fenced)
	Timeout time.Duration // give up after this long (ErrBarrierTimeout)
	Poll    time.Duration // resend and reread this often
	OnWait  func(BarrierState)
}

// AwaitBarrier is the directory's acknowledgement barrier (ARCHITECTURE
// decision 12): it resends the barrier notification for the tenant's
// change at version until every live member of tenant_directory_members
// has acknowledged a version at least as new, or the timeout. A member
// whose heartbeat is older than the lease refuses every tenant on its own
// (its fence), so it is not waited for.
func (s *Store) AwaitBarrier(ctx context.Context, cfg BarrierConfig, tenant domain.TenantID, version int64) (BarrierState, error) {
	start := time.Now()
	deadline := start.Add(cfg.Timeout)
	payload := fmt.Sprintf("%d:%s", version, tenant)
	for {
		if _, err := cfg.Pool.Exec(ctx, `SELECT pg_notify($1, $2)`, BarrierChannel, payload); err != nil {
			return BarrierState{Version: version}, fmt.Errorf("send the barrier: %w", err)
		}
		b := BarrierState{Version: version}
		err := s.ownerTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT member_id, host, pid, role, seen_version, heartbeat_at > now() - make_interval(secs => $1)
				FROM tenant_directory_members ORDER BY member_id`, cfg.Lease.Seconds())
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, host, role string
				var pid int
				var seen int64
				var live bool
				if err := rows.Scan(&id, &host, &pid, &role, &seen, &live); err != nil {
					return err
				}
				switch {
				case !live:
					b.MembersGone++
				case seen >= b.Version:
					b.MembersLive++
					b.MembersAcked++
				default:
					b.MembersLive++
					b.Waiting = append(b.Waiting, fmt.Sprintf("%s (%s pid %d, %s) at version %d", id, host, pid, role, seen))
				}
			}
			return rows.Err()
		})
		if err != nil {
			return b, fmt.Errorf("read tenant_directory_members: %w", err)
		}
		b.WaitedMS = time.Since(start).Milliseconds()
		if len(b.Waiting) == 0 {
			return b, nil
		}
		if time.Now().After(deadline) {
			return b, fmt.Errorf("%w (waited %s for %s)", ErrBarrierTimeout, cfg.Timeout, strings.Join(b.Waiting, "; "))
		}
		if cfg.OnWait != nil {
			cfg.OnWait(b)
		}
		if !pgsession.Sleep(ctx, cfg.Poll) {
			return b, ctx.Err()
		}
	}
}
