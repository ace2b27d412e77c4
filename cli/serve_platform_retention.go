package cli

import (
	"context"
	"time"

	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/portability"
)

// Defaults of the platform's own retention.
const (
	defaultPlatformRetentionInterval = 10 * time.Minute
	platformAuditBatch               = 1000
)

// wirePlatformRetention runs, in a serving process with the owner
// connection, the deletion of what the platform path itself keeps: export
// jobs past STRATA_EXPORT_RETENTION (archive included) and tenant_audit
// rows past STRATA_RETENTION_PLATFORM_AUDIT (docs/tenants.md,
// "Retention"). These are control-plane tables only the owner may write,
// which is why the tenants' retention job (the projector, under row-level
// security) does not do it. Every such process runs it: the deletes are
// idempotent and skip what another holds, so no lease is needed.
func wirePlatformRetention(a *app, store *tenancy.Store, jobs *portability.Jobs) error {
	if store == nil {
		return nil
	}
	interval, err := a.env.duration("STRATA_PLATFORM_RETENTION_INTERVAL", defaultPlatformRetentionInterval)
	if err != nil {
		return err
	}
	window := tenancy.Window{D: 365 * 24 * time.Hour}
	if v := a.env.str("STRATA_RETENTION_PLATFORM_AUDIT", ""); v != "" {
		if window, err = tenancy.ParseWindow(v); err != nil {
			return err
		}
	}
	a.workers = append(a.workers, worker{name: "platform retention", run: func(ctx context.Context) error {
		for {
			if jobs != nil {
				if n, err := jobs.Expire(ctx); err != nil && ctx.Err() == nil {
					a.logger.Warn("platform retention: export jobs", "error", err.Error())
				} else if n > 0 {
					a.logger.Info("platform retention: expired export jobs deleted", "jobs", n)
				}
			}
			if !window.Keep {
				if n, err := store.ExpireAudit(ctx, window.D, platformAuditBatch); err != nil && ctx.Err() == nil {
					a.logger.Warn("platform retention: tenant_audit", "error", err.Error())
				} else if n > 0 {
					a.logger.Info("platform retention: tenant_audit rows deleted", "rows", n, "window", window.String())
				}
			}
			if !pgsession.Sleep(ctx, interval) {
				return nil
			}
		}
	}})
	return nil
}
