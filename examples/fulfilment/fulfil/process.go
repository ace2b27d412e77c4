package fulfil

import (
	"time"

	"github.com/strata-es/strata/domain/decision"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
	"github.com/strata-es/strata/examples/orders/order"
)

// Name is the process's stable identity: its checkpoint, its lease, its dead
// letters and the prefix of its steps' idempotency keys. Renaming it starts
// a new process that sees every order again.
const Name = "fulfilment"

// DeadlinePayment is the one deadline: placed.At + PaymentTimeout.
const DeadlinePayment = "payment"

// PortPayment is the port the capture and void intents go through.
const PortPayment = "payment"

// The commands the process issues, by the name they are bound under
// (examples/inventory/stockcmd's and examples/orders/ordercmd' command names).
const (
	CommandReserve = "inventory.reserve"
	CommandRelease = "inventory.release"
	CommandCommit  = "inventory.commit"
	CommandPay     = "order.pay"
	CommandCancel  = "order.cancel"
)

// Step keys. A step's key is stable within an instance, so that a step is
// issued (and its outcome delivered) once; the idempotency key the runtime
// derives from it is the provider's Idempotency-Key for intents.
const (
	StepCapture = "capture"
	StepVoid    = "void"
	StepPay     = "pay"
	StepCancel  = "cancel"
)

// StepReserve, StepRelease and StepCommit are the steps on one line's SKU.
func StepReserve(sku string) string { return "reserve:" + sku }
func StepRelease(sku string) string { return "release:" + sku }
func StepCommit(sku string) string  { return "commit:" + sku }

// Cancellation reasons the process gives the order.
const (
	ReasonOutOfStock      = "out_of_stock"
	ReasonPaymentDeclined = "payment_declined"
	ReasonPaymentTimeout  = "payment_timeout"
)

// Statuses: lower-case labels, stable (metrics and operators use them).
const (
	StatusDraft           = "draft"            // lines may change; nothing held
	StatusReserving       = "reserving"        // placed; reservation outcomes outstanding
	StatusAwaitingPayment = "awaiting_payment" // every line reserved; the capture or the customer's payment outstanding
	StatusPaying          = "paying"           // captured; order.pay with the provider's reference outstanding
	StatusVoiding         = "voiding"          // deadline passed with a capture outstanding: voiding it first
	StatusCancelling      = "cancelling"       // order.cancel issued; waiting for order.cancelled (or order.paid)
	StatusCommitting      = "committing"       // paid; commits (or reservation outcomes) outstanding
	StatusReleasing       = "releasing"        // cancelled or unfulfillable; releases (or a void) outstanding
	// Terminal statuses.
	StatusCompleted       = "completed"        // paid, every line committed
	StatusCancelled       = "cancelled"        // cancelled, nothing held, no capture kept
	StatusPaidUnfulfilled = "paid_unfulfilled" // paid, but a line could not be reserved (or committed): what was held is released; needs a refund by hand
	StatusVoidRefused     = "void_refused"     // cancelled, but the provider refused to void our capture: money may be kept, reconcile by hand
	StatusUntracked       = "untracked"        // the first event seen was not order.created (an order older than the process): left alone
)

// StepState is where one step is: not issued, issued without an outcome,
// or its definite outcome.
type StepState string

const (
	StepNone    StepState = ""
	StepPending StepState = "pending"
	StepOK      StepState = "ok"
	StepRefused StepState = "refused"
)

func (s StepState) resolved() bool { return s == StepOK || s == StepRefused }

// Process is the fulfilment process configured: how long a placed order
// may stay unpaid, and whether the process takes the payment itself
// (the http provider) or waits for the customer's order.pay (manual).
type Process struct {
	PaymentTimeout time.Duration
	// CapturePayments: capture through the payment port once every line
	// is reserved. False (manual): no intent; the customer pays with
	// POST /v1/orders/{id}/pay before the deadline.
	CapturePayments bool
}

// The payloads of the commands the process issues: each has the JSON of
// the command it is bound to (examples/inventory/stockcmd's Reserve,
// Release and Commit; examples/orders/ordercmd's PayOrder and
// CancelOrder), which process.Bind decodes with unknown fields refused.
// The process speaks to the other modules' write sides the way a client of
// their HTTP routes does, by name and JSON, so its domain imports none of
// them (examples/fulfilment/fulfilcmd's tests hold each payload to its
// command's type).
type (
	// ReserveStock is inventory.reserve: Quantity of SKU held under the
	// order's ID as the reservation's.
	ReserveStock struct {
		SKU           string `json:"sku"`
		ReservationID string `json:"reservation_id"`
		Quantity      int64  `json:"quantity"`
	}
	// ReleaseStock is inventory.release of the order's reservation of SKU.
	ReleaseStock struct {
		SKU           string `json:"sku"`
		ReservationID string `json:"reservation_id"`
	}
	// CommitStock is inventory.commit of the order's reservation of SKU.
	CommitStock struct {
		SKU           string `json:"sku"`
		ReservationID string `json:"reservation_id"`
	}
	// PayOrder is order.pay with the provider's reference.
	PayOrder struct {
		OrderID          string `json:"order_id"`
		PaymentReference string `json:"payment_reference"`
	}
	// CancelOrder is order.cancel with the process's reason.
	CancelOrder struct {
		OrderID string `json:"order_id"`
		Reason  string `json:"reason"`
	}
)

// Payment is an intent's payload on the payment port (the JSON of
// fulfilcmd/payhttp's Request): a capture of Amount (minor units) of
// Currency for OrderID, or a void of the capture whose idempotency key is
// CaptureKey.
type Payment struct {
	Op       string `json:"op"` // PaymentCapture or PaymentVoid
	OrderID  string `json:"order_id"`
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// CaptureKey (void) is the capture step's idempotency key
	// (decision.StepKey), as the runtime passed it to the capture: a void
	// asked for before the capture ran still names it.
	CaptureKey string `json:"capture_key,omitempty"`
}

// Payment operations.
const (
	PaymentCapture = "capture"
	PaymentVoid    = "void"
)

// Captured is what the payment port answers a capture with: the provider's
// capture ID, the order's payment reference.
type Captured struct {
	CaptureID string `json:"capture_id"`
}

// Personal is what an instance keeps of the order's customer: the payment
// reference (the order's, and the provider's capture ID that becomes it)
// in its state, the pay command and the capture's result. A customer's
// erasure gives them the order's own tombstone (docs/personal-data.md).
var Personal = []event.PersonalField{
	{Name: "payment_reference", Tombstone: event.Erased(order.ErasedPaymentReference)},
	{Name: "capture_ref", Tombstone: event.Erased(order.ErasedPaymentReference)},
	{Name: "capture_id", Tombstone: event.Erased(order.ErasedPaymentReference)},
}

// State is one instance: what the order's events said, and where every
// step the instance issued is. It round-trips through encoding/json.
type State struct {
	OrderID  string      `json:"order_id"`
	Version  int64       `json:"version"` // last order event applied
	Currency string      `json:"currency,omitempty"`
	Lines    []Line      `json:"lines,omitempty"` // the draft's lines, in order
	Placed   bool        `json:"placed,omitempty"`
	PlacedAt time.Time   `json:"placed_at,omitzero"`
	Total    money.Money `json:"total,omitzero"`

	Paid             bool   `json:"paid,omitempty"`
	PaymentReference string `json:"payment_reference,omitempty"`
	Cancelled        bool   `json:"cancelled,omitempty"`
	CancelReason     string `json:"cancel_reason,omitempty"`
	TimedOut         bool   `json:"timed_out,omitempty"`
	Untracked        bool   `json:"untracked,omitempty"`

	// Reservations: one per line, fixed when the order is placed.
	Reservations []Reservation `json:"reservations,omitempty"`

	Deadline       time.Time `json:"deadline,omitzero"`
	DeadlineClosed bool      `json:"deadline_closed,omitempty"`

	Capture     StepState `json:"capture,omitempty"`
	CaptureRef  string    `json:"capture_ref,omitempty"`
	Void        StepState `json:"void,omitempty"`
	Pay         StepState `json:"pay,omitempty"`
	Cancel      StepState `json:"cancel,omitempty"`
	CancelAsked string    `json:"cancel_asked,omitempty"` // the reason we gave
	LastRefusal string    `json:"last_refusal,omitempty"`
	Status      string    `json:"status,omitempty"`
	Done        bool      `json:"done,omitempty"`
}

// Line is one product of the order.
type Line struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// Reservation is one line's stock, held under the order's ID.
type Reservation struct {
	SKU      string    `json:"sku"`
	Quantity int64     `json:"quantity"`
	Reserve  StepState `json:"reserve,omitempty"`
	Release  StepState `json:"release,omitempty"`
	Commit   StepState `json:"commit,omitempty"`
}

// EventTypes are the order events the process consumes.
func EventTypes() []string {
	return []string{order.TypeCreated, order.TypeLineAdded, order.TypeLineRemoved, order.TypePlaced, order.TypePaid, order.TypeCancelled}
}

// Correlate names the instance of an order stream's event: the order's ID,
// following the order's stream. ok is false for any other stream.
func Correlate(ev decision.Event) (instance, stream string, ok bool) {
	id, ok := order.OrderIDFromStream(ev.Stream)
	return id, ev.Stream, ok
}

// Codecs are the module's event types: none. The process consumes the
// order module's events and records its own state, steps and deadlines in
// the runtime's tables, not in the log.
func Codecs() []event.Codec { return nil }
