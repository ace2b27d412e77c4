package personal

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/internal/pgsession"
)

// ForgetChannel is the LISTEN/NOTIFY channel on which Destroy announces a
// destroyed key, in the transaction that deletes it (a notification is
// delivered at commit): "<tenant> <key ID> <subject hash>".
const ForgetChannel = "strata_subject_keys"

// Listen keeps k's caches true to the database behind pool until ctx
// ends: it LISTENs on ForgetChannel on a connection of its own and makes k
// forget each destroyed key, so that no process goes on sealing with a key
// another destroyed, nor opening with it. After every (re)connection it
// forgets everything (a key destroyed while it was not listening sent a
// notification nobody received). It returns nil when ctx ends; connection
// failures are logged and retried.
func (k *Keyring) Listen(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	const retry = time.Second
	for ctx.Err() == nil {
		c, err := pool.Acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				logger.Warn("keyring: cannot connect to listen for destroyed keys; retrying", "error", err.Error())
			}
			pgsession.Sleep(ctx, retry)
			continue
		}
		conn := c.Hijack()
		if _, err = conn.Exec(ctx, `LISTEN `+ForgetChannel); err == nil {
			k.cache.clear()
			for {
				n, werr := conn.WaitForNotification(ctx)
				if werr != nil {
					err = werr
					break
				}
				if f := strings.Fields(n.Payload); len(f) == 3 {
					k.cache.forget(f[0], f[2], f[1])
				}
			}
		}
		pgsession.Close(conn)
		if ctx.Err() == nil {
			logger.Warn("keyring: lost the connection listening for destroyed keys; reconnecting", "error", err.Error())
			pgsession.Sleep(ctx, retry)
		}
	}
	return nil
}
