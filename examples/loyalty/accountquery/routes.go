// Package accountquery is the loyalty module's query side: the balance of
// a customer's account.
package accountquery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/readmodels/queryapi"

	"example.com/loyalty/accountview"
)

// Balance is an account's row.
type Balance struct {
	Customer string `json:"customer_id"`
	Balance  int64  `json:"balance"`
	Earned   int64  `json:"earned"`
	Redeemed int64  `json:"redeemed"`
	Version  int64  `json:"version"`
}

// Queries are the loyalty query routes reading through d.
func Queries(d *readmodels.DB) []queryapi.Route {
	return []queryapi.Route{{Name: "query.loyalty_balance", Path: "/v1/loyalty/{customer}", Projections: []string{accountview.BalancesName},
		Prepare: func(r *http.Request, _ url.Values) (queryapi.Read, error) {
			id, err := httpapi.PathID(r, "customer", "customer_id")
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context) (any, error) {
				var b Balance
				var err error
				qerr := d.InTenant(ctx, func(q *pgx.Batch) {
					q.Queue(`SELECT customer_id, balance, earned, redeemed, version FROM loyalty_balances WHERE tenant_id = $1 AND customer_id = $2`,
						readmodels.TenantOf(ctx), id).QueryRow(func(row pgx.Row) error {
						err = row.Scan(&b.Customer, &b.Balance, &b.Earned, &b.Redeemed, &b.Version)
						if errors.Is(err, pgx.ErrNoRows) {
							return nil
						}
						return err
					})
				})
				switch {
				case qerr != nil:
					return nil, fmt.Errorf("read loyalty balance: %w", qerr)
				case errors.Is(err, pgx.ErrNoRows):
					return nil, fmt.Errorf("%w: no loyalty account %s", domain.ErrNotFound, id)
				}
				return b, nil
			}, nil
		}}}
}
