package personal

import (
	"context"
	"log/slog"
	"strings"

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
	return pgsession.Listen(ctx, pool, ForgetChannel, "keyring (destroyed keys)", logger, k.cache.clear, func(payload string) {
		if f := strings.Fields(payload); len(f) == 3 {
			k.cache.forget(f[0], f[2], f[1])
		}
	})
}
