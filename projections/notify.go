package projections

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/internal/pgsession"
)

// NotifyChannel is the LISTEN/NOTIFY channel on which appends are announced
// to projection runners of other processes. The payload is empty: a
// notification only means "read the log".
const NotifyChannel = "strata_events"

// NotifyAppends sends a NOTIFY on NotifyChannel after appends committed in
// this process, until ctx ends. appended has the shape of Signal.C and
// fires after each committed append.
//
// The NOTIFY is its own tiny transaction, after the append committed. It
// is deliberately not part of the append transaction: a NOTIFY takes
// PostgreSQL's global notification-queue lock at commit and would
// serialise every append behind it. Notifications are coalesced: at most
// one is in flight, and all appends that commit while it is being sent are
// covered by the next one, whatever the append rate.
func NotifyAppends(ctx context.Context, pool *pgxpool.Pool, appended func() <-chan struct{}, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	var lastWarn time.Time
	ch := appended()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
		ch = appended() // before sending: appends from now on get the next NOTIFY
		if _, err := pool.Exec(ctx, `SELECT pg_notify($1, '')`, NotifyChannel); err != nil && ctx.Err() == nil {
			// Runners elsewhere still poll; warn at most once a minute.
			if time.Since(lastWarn) > time.Minute {
				logger.Warn("cannot notify projection runners of new events; they will poll", "error", err.Error())
				lastWarn = time.Now()
			}
		}
	}
}

// Listen LISTENs on NotifyChannel on a connection of its own (taken out of
// pool) and fires wake on every notification, until ctx ends. After
// (re)connecting it fires once, since notifications sent while it was not
// listening are lost. It returns nil when ctx ends; connection failures are
// logged and retried.
func Listen(ctx context.Context, pool *pgxpool.Pool, wake *Signal, logger *slog.Logger) error {
	return pgsession.Listen(ctx, pool, NotifyChannel, "projection runners (new events; they poll meanwhile)", logger, wake.Fire, func(string) { wake.Fire() })
}
