package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/personal"
	"github.com/strata-es/strata/personal/awskms"
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
	kek, err := externalKEK(ctx, e)
	if err != nil {
		return nil, err
	}
	return personal.NewKeyring(pool, personal.DatabaseKEKs(ctx, pool, kek), personal.Config{}), nil
}

// externalKEK is the key-encryption key held outside the databases, when
// one is configured: STRATA_KEK_FILE's, or the AWS KMS key
// STRATA_KEK_AWS_KMS_KEY names (reached with the AWS SDK's usual settings:
// AWS_REGION, AWS_ENDPOINT_URL_KMS, credentials from the environment, the
// shared files or the instance's role). Nil: each database holds its own.
func externalKEK(ctx context.Context, e env) (personal.KEK, error) {
	path, key := e.str("STRATA_KEK_FILE", ""), e.str("STRATA_KEK_AWS_KMS_KEY", "")
	switch {
	case path != "" && key != "":
		return nil, errors.New("STRATA_KEK_FILE and STRATA_KEK_AWS_KMS_KEY both name a key-encryption key: set one")
	case path != "":
		return personal.FileKEK(path)
	case key != "":
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("STRATA_KEK_AWS_KMS_KEY: AWS settings: %w", err)
		}
		return awskms.New(ctx, kms.NewFromConfig(cfg), key)
	}
	return nil, nil
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
