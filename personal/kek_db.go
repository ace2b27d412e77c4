package personal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DatabaseKEKs returns the key-encryption keys of a deployment: those held
// in the control plane's key_encryption_keys (q), whose current one wraps
// new data keys, unless file (a key file's KEK, may be nil) is given: then
// it is the current one and the database's only unwrap what they wrapped
// until a rotation re-wraps it. Without a file and without a KEK in the
// database, the first is created.
func DatabaseKEKs(ctx context.Context, q Querier, file KEK) *KEKs {
	load := func() ([]KEK, string, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		all, cur, err := loadDatabaseKEKs(lctx, q)
		if err != nil {
			return nil, "", err
		}
		if file != nil {
			return append(all, file), file.ID(), nil
		}
		if cur == "" {
			if err := createDatabaseKEK(lctx, q); err != nil {
				return nil, "", err
			}
			if all, cur, err = loadDatabaseKEKs(lctx, q); err != nil {
				return nil, "", err
			}
		}
		return all, cur, nil
	}
	return NewKEKs(load)
}

func loadDatabaseKEKs(ctx context.Context, q Querier) ([]KEK, string, error) {
	rows, err := q.Query(ctx, `SELECT id, key, current FROM key_encryption_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, "", fmt.Errorf("read the key-encryption keys: %w", err)
	}
	var all []KEK
	var cur string
	for rows.Next() {
		var id string
		var key []byte
		var current bool
		if err := rows.Scan(&id, &key, &current); err != nil {
			rows.Close()
			return nil, "", err
		}
		k, err := newAESKEK(id, key)
		if err != nil {
			rows.Close()
			return nil, "", err
		}
		all = append(all, k)
		if current {
			cur = id
		}
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("read the key-encryption keys: %w", err)
	}
	return all, cur, nil
}

// createDatabaseKEK stores a new random KEK, the first (raced by every
// process at its first use: one wins, the others insert nothing).
func createDatabaseKEK(ctx context.Context, q Querier) error {
	id, key, err := newDatabaseKEK()
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, `INSERT INTO key_encryption_keys (id, key, current) VALUES ($1, $2, true) ON CONFLICT DO NOTHING`, id, key); err != nil {
		return fmt.Errorf("store a key-encryption key: %w", err)
	}
	return nil
}

func newDatabaseKEK() (string, []byte, error) {
	key := make([]byte, 32)
	raw := make([]byte, 8)
	if _, err := rand.Read(key); err != nil {
		return "", nil, err
	}
	if _, err := rand.Read(raw); err != nil {
		return "", nil, err
	}
	return "db-" + hex.EncodeToString(raw), key, nil
}
