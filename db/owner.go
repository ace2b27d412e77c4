package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OwnerTx runs fn in a transaction on the owner connection as strata_owner
// (SET LOCAL ROLE: the login must be a member), committing when fn returns
// nil. The platform paths (the tenant directory, exports, placements,
// moves) write the control plane with it.
func OwnerTx(ctx context.Context, owner interface {
	Begin(context.Context) (pgx.Tx, error)
}, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, owner, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+RoleOwner); err != nil {
			return fmt.Errorf("become %s (the owner connection must be a member): %w", RoleOwner, err)
		}
		return fn(tx)
	})
}
