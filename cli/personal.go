package cli

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/personal"
)

// protect returns reg sealing and opening personal data with the keyring
// of the database behind pool (keyring).
func protect(ctx context.Context, e env, reg *event.Registry, pool keyPool) (*event.Registry, error) {
	k, err := keyring(ctx, e, pool)
	if err != nil {
		return nil, err
	}
	return reg.Protect(k), nil
}

// keyPool is a pool or connection that reads and creates subject_keys:
// the app role's, or the owner's.
type keyPool interface {
	personal.Batcher
	personal.Querier
}

// keyring is the keyring of the database behind pool: its data keys
// wrapped by the database's key-encryption keys, or by STRATA_KEK_FILE's
// when set (docs/personal-data.md). Each database (the control plane, each
// placement) keeps its tenants' keys and its own KEKs.
func keyring(ctx context.Context, e env, pool keyPool) (*personal.Keyring, error) {
	var file personal.KEK
	if path := e.str("STRATA_KEK_FILE", ""); path != "" {
		var err error
		if file, err = personal.FileKEK(path); err != nil {
			return nil, err
		}
	}
	return personal.NewKeyring(pool, personal.DatabaseKEKs(ctx, pool, file), personal.Config{}), nil
}

// listenKeys adds the worker that keeps the app's keyring true to its
// database: a key destroyed by any process is forgotten here too.
func listenKeys(a *app, pool *pgxpool.Pool) {
	k, ok := a.registry.Protector().(*personal.Keyring)
	if !ok {
		return
	}
	a.workers = append(a.workers, worker{name: "keyring", run: func(ctx context.Context) error { return k.Listen(ctx, pool, a.logger) }})
}
