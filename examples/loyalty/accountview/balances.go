// Package accountview is the loyalty module's read side: the projection of
// every customer's balance (loyalty_balances) and its table's migration
// line.
package accountview

import (
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/projections"

	"example.com/loyalty/account"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations is the loyalty module's migration line and its one
// tenant-scoped table.
var Migrations = db.EmbeddedLine("loyalty", migrationFiles, "migrations", db.TenantTables("loyalty_balances"))

// BalancesName is the projection's name: its checkpoint key. Renaming it
// makes a new projection that rebuilds every row from the first event.
const BalancesName = "loyalty_balances"

// Balances keeps one row per account.
type Balances struct {
	table            string
	earned, redeemed string
}

var (
	_ projections.Retargetable = (*Balances)(nil)
	_ projections.StreamScoped = (*Balances)(nil)
)

// NewBalances returns the projection writing into table ("": the live one).
func NewBalances(table string) *Balances {
	if table == "" {
		table = BalancesName
	}
	t := projections.Ident(table)
	return &Balances{table: table,
		// Points earned open the account's row or add to it.
		earned: `INSERT INTO ` + t + ` AS b (tenant_id, customer_id, balance, earned, redeemed, version, updated_at)
VALUES ($1, $2, $3, $3, 0, $4, $5)
ON CONFLICT (tenant_id, customer_id) DO UPDATE
SET balance = b.balance + EXCLUDED.earned, earned = b.earned + EXCLUDED.earned, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at`,
		// A redemption changes an existing row (not an upsert: the row to
		// insert would have to pass the balance's CHECK with the negative
		// delta as its value).
		redeemed: `UPDATE ` + t + ` SET balance = balance - $3, redeemed = redeemed + $3, version = $4, updated_at = $5
WHERE tenant_id = $1 AND customer_id = $2`}
}

// All returns the module's projections writing into their live tables.
func All() []projections.Projection { return []projections.Projection{NewBalances("")} }

func (p *Balances) Name() string { return BalancesName }

func (p *Balances) EventTypes() []string { return []string{account.TypeEarned, account.TypeRedeemed} }

func (p *Balances) Tables() []string { return []string{p.table} }

// Apply adds the event's points to its account's row.
func (p *Balances) Apply(b *pgx.Batch, ev projections.Event) error {
	customer, ok := account.CustomerFromStream(ev.Stream)
	if !ok {
		return fmt.Errorf("%w: stream %q is not a loyalty stream", projections.ErrUnexpectedEvent, ev.Stream)
	}
	switch e := ev.Payload.(type) {
	case account.Earned:
		b.Queue(p.earned, ev.Tenant, customer, e.Points, ev.Version, e.At)
	case account.Redeemed:
		projections.ExpectOne(b.Queue(p.redeemed, ev.Tenant, customer, e.Points, ev.Version, e.At), "loyalty account", customer)
	default:
		return projections.Unexpected(ev)
	}
	return nil
}

// WithTables implements projections.Retargetable (rebuilds write into a
// shadow table).
func (p *Balances) WithTables(rename map[string]string) projections.Projection {
	return NewBalances(projections.Renamed(rename, p.table))
}

// DeleteStreams implements projections.StreamScoped: an account is a
// stream.
func (p *Balances) DeleteStreams(b *pgx.Batch, tenant string, streams []string) error {
	var customers []string
	for _, s := range streams {
		if c, ok := account.CustomerFromStream(s); ok {
			customers = append(customers, c)
		}
	}
	b.Queue(`DELETE FROM `+projections.Ident(p.table)+` WHERE tenant_id = $1 AND customer_id = ANY($2::text[])`, tenant, customers)
	return nil
}
