package personal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
)

// Owner is the owner's connection to one database (pgx.Conn, or a pool
// logged in as the owner).
type Owner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Destroy deletes tenant's subject's data key, as the eraser (the owner
// connection takes the role for the transaction): every field it sealed is
// shredded. Keyrings that Listen forget it when the deletion commits. It
// returns the destroyed key's ID, "" when the subject had none.
func Destroy(ctx context.Context, owner Owner, tenant, subject string) (string, error) {
	var id string
	err := asEraser(ctx, owner, tenant, func(tx pgx.Tx) error {
		var err error
		id, err = DestroyIn(ctx, tx, tenant, subject)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("destroy the subject's key: %w", err)
	}
	return id, nil
}

// DestroyIn is Destroy in tx, a transaction as the eraser under the
// tenant (the subject erasure records the step in the same one).
func DestroyIn(ctx context.Context, tx pgx.Tx, tenant, subject string) (string, error) {
	var id string
	hash := SubjectHash(tenant, subject)
	err := tx.QueryRow(ctx, `DELETE FROM subject_keys WHERE tenant_id = $1 AND subject_hash = $2 RETURNING key_id`, tenant, hash).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	// Every listening keyring forgets the key when this commits.
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ForgetChannel, tenant+" "+id+" "+hash); err != nil {
		return "", err
	}
	return id, nil
}

// asEraser runs fn in a transaction under tenant as the eraser, the one
// role row-level security lets the owner's connection act for on the
// tenant's keys (deleting one, re-wrapping them: migration 020 grants it
// the update of kek_id and wrapped).
func asEraser(ctx context.Context, owner Owner, tenant string, fn func(pgx.Tx) error) error {
	tx, err := owner.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.RoleEraser); err != nil {
		return err
	}
	if err := db.SetTenant(ctx, tx, tenant); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Rotation is what a rotation did in one database.
type Rotation struct {
	// To is the KEK every data key is wrapped by now.
	To string
	// Tenants and Keys count the keys re-wrapped and their tenants.
	Tenants, Keys int
	// Retired are the database KEKs deleted: they wrapped no key any more.
	Retired []string
}

// RotateOptions tune a rotation.
type RotateOptions struct {
	// Grace is how long a database KEK must have stopped being the current
	// one before it is deleted (default 10 minutes: every process has read
	// the new current one, and wraps no new key with the old).
	Grace time.Duration
	// Progress, if set, is told after each tenant.
	Progress func(tenant string, keys int)
}

// Rotate re-wraps every data key of tenants in the database behind owner
// (the owner's connection) with a new KEK, without touching an event, and
// deletes the database KEKs that no longer wrap any key. The new KEK is
// file when given (a key file every process is configured with,
// STRATA_KEK_FILE); else a new database KEK, made the current one, unless
// the current one does not wrap every key yet: then an unfinished
// rotation is finished instead. A rotation stopped halfway is resumed by
// running it again.
func Rotate(ctx context.Context, owner OwnerQuerier, file KEK, tenants []string, opts RotateOptions) (Rotation, error) {
	if opts.Grace == 0 {
		opts.Grace = 10 * time.Minute
	}
	keks := DatabaseKEKs(ctx, owner, file)
	to, err := keks.Current()
	if err != nil {
		return Rotation{}, err
	}
	if file == nil {
		counts, err := KeyCounts(ctx, owner, tenants)
		if err != nil {
			return Rotation{}, err
		}
		if unfinished := len(counts) > 1 || len(counts) == 1 && counts[to.ID()] == 0; !unfinished {
			if err := newCurrentKEK(ctx, owner); err != nil {
				return Rotation{}, err
			}
			if err := keks.Reload(); err != nil {
				return Rotation{}, err
			}
			if to, err = keks.Current(); err != nil {
				return Rotation{}, err
			}
		}
	}
	out := Rotation{To: to.ID()}
	for _, tenant := range tenants {
		n := 0
		for {
			done, err := rewrapBatch(ctx, owner, keks, to, tenant, 500)
			if err != nil {
				return out, fmt.Errorf("tenant %s: %w", tenant, err)
			}
			n += done
			if done == 0 {
				break
			}
		}
		out.Tenants++
		out.Keys += n
		if opts.Progress != nil {
			opts.Progress(tenant, n)
		}
	}
	if file != nil {
		// The database's current KEK steps down: the file's is current.
		err := db.OwnerTx(ctx, owner, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE key_encryption_keys SET current = false, retired_at = now() WHERE current`)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("retire the database's current key-encryption key: %w", err)
		}
	}
	counts, err := KeyCounts(ctx, owner, tenants)
	if err != nil {
		return out, err
	}
	inUse := make([]string, 0, len(counts))
	for id := range counts {
		inUse = append(inUse, id)
	}
	err = db.OwnerTx(ctx, owner, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM key_encryption_keys WHERE NOT current AND retired_at <= now() - $1 * interval '1 microsecond' AND id <> ALL($2) RETURNING id`,
			opts.Grace.Microseconds(), inUse)
		if err != nil {
			return err
		}
		out.Retired, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return out, fmt.Errorf("retire key-encryption keys: %w", err)
	}
	return out, nil
}

// OwnerQuerier is the owner's connection: transactions and statements.
type OwnerQuerier interface {
	Owner
	Querier
	Batcher
}

// newCurrentKEK makes a new random database KEK the current one.
func newCurrentKEK(ctx context.Context, owner Owner) error {
	id, key, err := newDatabaseKEK()
	if err != nil {
		return err
	}
	return db.OwnerTx(ctx, owner, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE key_encryption_keys SET current = false, retired_at = now() WHERE current`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO key_encryption_keys (id, key, current) VALUES ($1, $2, true)`, id, key); err != nil {
			return fmt.Errorf("store a key-encryption key: %w", err)
		}
		return nil
	})
}

func rewrapBatch(ctx context.Context, owner Owner, keks *KEKs, to KEK, tenant string, limit int) (int, error) {
	n := 0
	err := asEraser(ctx, owner, tenant, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT key_id, kek_id, wrapped FROM subject_keys WHERE tenant_id = $1 AND kek_id <> $2 ORDER BY key_id LIMIT $3 FOR UPDATE`,
			tenant, to.ID(), limit)
		if err != nil {
			return err
		}
		type row struct {
			id, kek string
			wrapped []byte
		}
		var todo []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.kek, &r.wrapped); err != nil {
				rows.Close()
				return err
			}
			todo = append(todo, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, r := range todo {
			again, err := rewrap(keks, to, tenant, r.id, r.kek, r.wrapped)
			if err != nil {
				return err
			}
			b.Queue(`UPDATE subject_keys SET kek_id = $3, wrapped = $4 WHERE tenant_id = $1 AND key_id = $2`, tenant, r.id, to.ID(), again)
		}
		n = len(todo)
		return tx.SendBatch(ctx, b).Close()
	})
	return n, err
}

// KeyCounts counts the data keys of the database behind q by the KEK that
// wraps them (as the owner: every tenant's).
func KeyCounts(ctx context.Context, owner Owner, tenants []string) (map[string]int, error) {
	out := map[string]int{}
	for _, tenant := range tenants {
		err := asEraser(ctx, owner, tenant, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT kek_id, count(*) FROM subject_keys WHERE tenant_id = $1 GROUP BY kek_id`, tenant)
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				var n int
				if err := rows.Scan(&id, &n); err != nil {
					rows.Close()
					return err
				}
				out[id] += n
			}
			return rows.Err()
		})
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", tenant, err)
		}
	}
	return out, nil
}

// Tenants lists the tenants whose keys may be in the database behind
// owner (the owner's connection, whose default role is strata_projector,
// which reads the whole log): those of its log and of its tenant
// directory. A rotation and a status walk them, each under its own
// setting.
func Tenants(ctx context.Context, owner OwnerQuerier) ([]string, error) {
	// A loose index scan of the log's tenant index: one probe per tenant,
	// not a pass over every event.
	rows, err := owner.Query(ctx, `WITH RECURSIVE t AS (
    SELECT min(tenant_id) AS id FROM events
    UNION ALL
    SELECT (SELECT min(tenant_id) FROM events WHERE tenant_id > t.id) FROM t WHERE t.id IS NOT NULL
)
SELECT id FROM t WHERE id IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("list the log's tenants: %w", err)
	}
	logged, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the log's tenants: %w", err)
	}
	var listed []string
	err = db.OwnerTx(ctx, owner, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id FROM tenants`)
		if err != nil {
			return err
		}
		listed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list the directory's tenants: %w", err)
	}
	all := append(logged, listed...)
	slices.Sort(all)
	return slices.Compact(all), nil
}

// rewrap unwraps tenant's data key keyID with the KEK kekID of from and
// wraps it again with to; the key is in memory only meanwhile.
func rewrap(from *KEKs, to KEK, tenant, keyID, kekID string, wrapped []byte) ([]byte, error) {
	kek, err := from.Get(kekID)
	if err != nil {
		return nil, err
	}
	ad := wrapAD(tenant, keyID)
	dek, err := kek.Unwrap(wrapped, ad)
	if err != nil {
		return nil, fmt.Errorf("unwrap data key %s: %w", keyID, err)
	}
	defer clear(dek)
	return to.Wrap(dek, ad)
}
