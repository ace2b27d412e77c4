package pgsession

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Listen LISTENs on channel on a connection of its own (taken out of
// pool) until ctx ends, calling connected after every (re)connection
// (notifications sent while nobody listened are lost: the caller catches
// up there) and notified with each notification's payload. Connection
// failures are logged as what (what the listener is for) and retried
// every second. It returns nil when ctx ends.
func Listen(ctx context.Context, pool *pgxpool.Pool, channel, what string, logger *slog.Logger, connected func(), notified func(payload string)) error {
	if logger == nil {
		logger = slog.Default()
	}
	const retry = time.Second
	for ctx.Err() == nil {
		c, err := pool.Acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				logger.Warn(what+": cannot connect to listen; retrying", "channel", channel, "error", err.Error())
			}
			Sleep(ctx, retry)
			continue
		}
		conn := c.Hijack()
		if _, err = conn.Exec(ctx, `LISTEN `+channel); err == nil {
			connected()
			for {
				n, werr := conn.WaitForNotification(ctx)
				if werr != nil {
					err = werr
					break
				}
				notified(n.Payload)
			}
		}
		Close(conn)
		if ctx.Err() == nil {
			logger.Warn(what+": lost the connection listening; reconnecting", "channel", channel, "error", err.Error())
			Sleep(ctx, retry)
		}
	}
	return nil
}
