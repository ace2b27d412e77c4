package fulfilview

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/projections"
)

// Name is the projection's name: its checkpoint key. Renaming it makes a
// new projection that rebuilds every row from the first event.
const Name = "order_fulfilment"

// Stages (the stage column): derived from what the log shows, which is
// less than the process knows (a refused reservation leaves no event).
const (
	StageDraft           = "draft"            // the order is a draft
	StageReserving       = "reserving"        // placed, not every line reserved yet
	StageAwaitingPayment = "awaiting_payment" // placed, every line reserved
	StageCommitting      = "committing"       // paid, not every line committed yet
	StageCompleted       = "completed"        // paid, every line committed
	StageReleasing       = "releasing"        // a reservation is being given back (out of stock, cancelled)
	StageCancelled       = "cancelled"        // cancelled, nothing held
	StagePaidUnfulfilled = "paid_unfulfilled" // paid, but stock was released instead of committed
)

// Tables names the projection's tables (zero: the live ones).
type Tables struct {
	OrderFulfilment string // default order_fulfilment
}

// OrderFulfilment keeps one row per order.
type OrderFulfilment struct {
	tables                                Tables
	created, lineAdded, lineRemoved       string
	placed, paid, cancelled, reservations string
	restage                               string
	// The set-based path (ApplyBatch): every order's events of a batch
	// folded in Go into one row of one of two statements, so that a batch
	// writes each row once.
	batchInsert, batchUpdate string
}

var (
	_ projections.Retargetable    = (*OrderFulfilment)(nil)
	_ projections.BatchProjection = (*OrderFulfilment)(nil)
)

// New returns the projection writing into t.
func New(t Tables) *OrderFulfilment {
	if t.OrderFulfilment == "" {
		t.OrderFulfilment = Name
	}
	table := projections.Ident(t.OrderFulfilment)
	set := func(assign string) string {
		return `UPDATE ` + table + ` SET ` + assign + `, updated_at = $3, last_position = $4
WHERE tenant_id = $1 AND order_id = $2`
	}
	return &OrderFulfilment{tables: t,
		created: `INSERT INTO ` + table + ` (tenant_id, order_id, stage, order_status, currency, lines, reserved, released, committed,
	version, updated_at, last_position)
VALUES ($1, $2, 'draft', 'draft', $5, '{}', 0, 0, 0, $6, $3, $4)`,
		lineAdded:   set(`lines = jsonb_set(lines, ARRAY[$5::text], to_jsonb(COALESCE((lines->>$5::text)::bigint, 0) + $6::bigint)), version = $7`),
		lineRemoved: set(`lines = lines - $5::text, version = $6`),
		placed:      set(`order_status = 'placed', total_amount = $5, version = $6`),
		paid:        set(`order_status = 'paid', payment_reference = $5, version = $6`),
		cancelled:   set(`order_status = 'cancelled', cancel_reason = NULLIF($5, ''), version = $6`),
		// An inventory event under a reservation ID that is no order of the
		// tenant's (a reservation made through the inventory API) matches
		// no row and changes nothing.
		reservations: set(`reserved = reserved + $5, released = released + $6, committed = committed + $7`),
		// The stage, from the row as the statement before left it. The
		// order of the WHENs is the precedence: what the order says first,
		// then what the stock says.
		restage: `UPDATE ` + table + ` SET stage = ` + stageOf("") + `
WHERE tenant_id = $1 AND order_id = $2`,
		// Orders created in the batch: the whole row, folded in Go from the
		// empty order, and its stage derived from it.
		batchInsert: `INSERT INTO ` + table + ` (tenant_id, order_id, stage, order_status, currency, lines, reserved, released, committed,
	total_amount, payment_reference, cancel_reason, version, updated_at, last_position)
SELECT $1, n.order_id, ` + stageOf("n.") + `, n.order_status, n.currency, n.lines, n.reserved, n.released, n.committed,
	n.total_amount, n.payment_reference, n.cancel_reason, n.version, n.at, n.pos
FROM unnest($2::text[], $3::text[], $4::text[], $5::jsonb[], $6::integer[], $7::integer[], $8::integer[],
	$9::bigint[], $10::text[], $11::text[], $12::bigint[], $13::timestamptz[], $14::bigint[])
	AS n(order_id, order_status, currency, lines, reserved, released, committed, total_amount, payment_reference, cancel_reason, version, at, pos)`,
		// Orders made by an earlier batch: each row found by key (keyed
		// plans, projections/handler.go), its new values computed from it
		// and the batch's patch, the stage derived from those, and the row
		// written once by ctid. A patch of lines maps a product to
		// {reset, add}: reset drops the line's quantity before add (a
		// removal, perhaps added again after), and a reset line left at
		// zero is removed. A NULL version marks a row the batch changes
		// only by stock events; RETURNING says which rows order events
		// changed (each must exist).
		batchUpdate: `UPDATE ` + table + ` AS t SET lines = n.lines, order_status = n.order_status, total_amount = n.total_amount,
	payment_reference = n.payment_reference, cancel_reason = n.cancel_reason, version = n.version,
	reserved = n.reserved, released = n.released, committed = n.committed,
	stage = ` + stageOf("n.") + `, updated_at = n.at, last_position = n.pos
FROM unnest($2::text[], $3::jsonb[], $4::text[], $5::boolean[], $6::bigint[], $7::boolean[], $8::text[], $9::boolean[], $10::text[],
	$11::bigint[], $12::integer[], $13::integer[], $14::integer[], $15::timestamptz[], $16::bigint[])
	AS u(order_id, patch, status, set_total, total, set_ref, ref, set_reason, reason, version, r, rl, c, at, pos)
CROSS JOIN LATERAL (SELECT k.ctid AS tid,
	CASE WHEN u.patch IS NULL THEN k.lines ELSE (
		SELECT COALESCE(jsonb_object_agg(x.k, x.v), '{}'::jsonb) FROM (
			SELECT e.key AS k, e.value AS v FROM jsonb_each(k.lines) e WHERE NOT (u.patch ? e.key)
			UNION ALL
			SELECT p.key, to_jsonb(CASE WHEN (p.value->>'reset')::boolean THEN 0 ELSE COALESCE((k.lines->>p.key)::bigint, 0) END + (p.value->>'add')::bigint)
			FROM jsonb_each(u.patch) p
			WHERE NOT ((p.value->>'reset')::boolean AND (p.value->>'add')::bigint = 0)) x) END AS lines,
	COALESCE(u.status, k.order_status) AS order_status,
	CASE WHEN u.set_total THEN u.total ELSE k.total_amount END AS total_amount,
	CASE WHEN u.set_ref THEN u.ref ELSE k.payment_reference END AS payment_reference,
	CASE WHEN u.set_reason THEN u.reason ELSE k.cancel_reason END AS cancel_reason,
	COALESCE(u.version, k.version) AS version,
	k.reserved + u.r AS reserved, k.released + u.rl AS released, k.committed + u.c AS committed,
	u.at, u.pos
	FROM ` + table + ` k WHERE k.tenant_id = $1 AND k.order_id = u.order_id OFFSET 0) n
WHERE t.ctid = n.tid
RETURNING u.version IS NOT NULL`,
	}
}

// stageOf derives the stage from a row's order_status, reserved,
// released, committed and lines, read through the qualifier q ("" for the
// row as the statements before left it, "n." for values a statement
// computes). The order of the WHENs is the precedence: what the order says
// first, then what the stock says.
func stageOf(q string) string {
	return strings.NewReplacer("$status", q+"order_status", "$reserved", q+"reserved", "$released", q+"released",
		"$committed", q+"committed", "$lines", q+"lines").Replace(`CASE
	WHEN $status = 'draft' THEN 'draft'
	WHEN $status = 'cancelled' THEN CASE WHEN $reserved > $released + $committed THEN 'releasing' ELSE 'cancelled' END
	WHEN $status = 'paid' AND $released > 0 THEN CASE WHEN $reserved > $released + $committed THEN 'releasing' ELSE 'paid_unfulfilled' END
	WHEN $status = 'paid' THEN CASE WHEN $committed >= (SELECT count(*) FROM jsonb_object_keys($lines)) THEN 'completed' ELSE 'committing' END
	WHEN $released > 0 THEN 'releasing'
	WHEN $reserved >= (SELECT count(*) FROM jsonb_object_keys($lines)) THEN 'awaiting_payment'
	ELSE 'reserving'
END`)
}

// All returns the fulfilment module's projections writing into their live
// tables.
func All() []projections.Projection { return []projections.Projection{New(Tables{})} }

// Name implements projections.Projection.
func (p *OrderFulfilment) Name() string { return Name }

// EventTypes implements projections.Projection.
func (p *OrderFulfilment) EventTypes() []string {
	return []string{order.TypeCreated, order.TypeLineAdded, order.TypeLineRemoved, order.TypePlaced, order.TypePaid, order.TypeCancelled,
		stock.TypeReserved, stock.TypeReleased, stock.TypeCommitted}
}

// Tables implements projections.Projection.
func (p *OrderFulfilment) Tables() []string { return []string{p.tables.OrderFulfilment} }

// PositionColumns names the columns that hold a log position (the events
// table's row identity), which belong to the database the log is in: a
// tenant's export carries the event's ordinal instead
// (tenancy/portability).
func (p *OrderFulfilment) PositionColumns() []string { return []string{"last_position"} }

// Apply implements projections.Projection.
func (p *OrderFulfilment) Apply(b *pgx.Batch, ev projections.Event) error {
	pos := int64(ev.Position.Minor)
	if _, ok := stock.SKUFromStream(ev.Stream); ok {
		var id string
		var reserved, released, committed int
		switch e := ev.Payload.(type) {
		case stock.Reserved:
			id, reserved = e.ReservationID, 1
			b.Queue(p.reservations, ev.Tenant, id, e.At, pos, reserved, released, committed)
		case stock.Released:
			id, released = e.ReservationID, 1
			b.Queue(p.reservations, ev.Tenant, id, e.At, pos, reserved, released, committed)
		case stock.Committed:
			id, committed = e.ReservationID, 1
			b.Queue(p.reservations, ev.Tenant, id, e.At, pos, reserved, released, committed)
		default:
			return projections.Unexpected(ev)
		}
		b.Queue(p.restage, ev.Tenant, id)
		return nil
	}
	id, ok := order.OrderIDFromStream(ev.Stream)
	if !ok {
		return fmt.Errorf("%w: stream %q is neither an order nor an inventory stream", projections.ErrUnexpectedEvent, ev.Stream)
	}
	switch e := ev.Payload.(type) {
	case order.Created:
		b.Queue(p.created, ev.Tenant, id, e.At, pos, e.Currency, ev.Version)
	case order.LineAdded:
		projections.ExpectOne(b.Queue(p.lineAdded, ev.Tenant, id, e.At, pos, e.ProductID, e.Quantity, ev.Version), "order", id)
	case order.LineRemoved:
		projections.ExpectOne(b.Queue(p.lineRemoved, ev.Tenant, id, e.At, pos, e.ProductID, ev.Version), "order", id)
	case order.Placed:
		projections.ExpectOne(b.Queue(p.placed, ev.Tenant, id, e.At, pos, e.Total.Amount, ev.Version), "order", id)
	case order.Paid:
		projections.ExpectOne(b.Queue(p.paid, ev.Tenant, id, e.At, pos, e.PaymentReference, ev.Version), "order", id)
	case order.Cancelled:
		projections.ExpectOne(b.Queue(p.cancelled, ev.Tenant, id, e.At, pos, e.Reason, ev.Version), "order", id)
	default:
		return projections.Unexpected(ev)
	}
	b.Queue(p.restage, ev.Tenant, id)
	return nil
}

// WithTables implements projections.Retargetable.
func (p *OrderFulfilment) WithTables(rename map[string]string) projections.Projection {
	return New(Tables{OrderFulfilment: projections.Renamed(rename, p.tables.OrderFulfilment)})
}
