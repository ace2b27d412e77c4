package order

import (
	"errors"
	"fmt"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/money"
)

// Rejections: a business rule said no. Each wraps domain.ErrRejected, and its
// message names the rule in plain words because it reaches API clients.
// ErrAmountOverflow (a line or order total beyond an int64 of minor units)
// is package money's own value, as ErrInvalidCurrency below is: errors.Is
// matches either name, and the messages are money's.
var (
	ErrAlreadyExists      = fmt.Errorf("%w: order already exists", domain.ErrRejected)
	ErrNotEditable        = fmt.Errorf("%w: order is not editable after it was placed or cancelled", domain.ErrRejected)
	ErrQuantityOutOfRange = fmt.Errorf("%w: quantity must be between %d and %d", domain.ErrRejected, MinQuantity, MaxQuantity)
	ErrTooManyLines       = fmt.Errorf("%w: an order may hold at most %d lines (distinct products)", domain.ErrRejected, MaxLines)
	ErrCurrencyMismatch   = fmt.Errorf("%w: amounts must all be in the order currency", domain.ErrRejected)
	ErrPriceMismatch      = fmt.Errorf("%w: unit price differs from the price already on the order", domain.ErrRejected)
	ErrAmountOverflow     = money.ErrAmountOverflow
	ErrLineNotFound       = fmt.Errorf("%w: product is not on the order", domain.ErrRejected)
	ErrEmptyOrder         = fmt.Errorf("%w: an empty order cannot be placed", domain.ErrRejected)
	ErrNotDraft           = fmt.Errorf("%w: only a draft order can be placed", domain.ErrRejected)
	ErrNotPlaced          = fmt.Errorf("%w: only a placed order can be paid", domain.ErrRejected)
	ErrAlreadyPaid        = fmt.Errorf("%w: a paid order cannot be cancelled", domain.ErrRejected)
	ErrAlreadyCancelled   = fmt.Errorf("%w: order is already cancelled", domain.ErrRejected)
)

// ErrOrderNotFound is returned by every command but Create on an order that
// does not exist. It wraps domain.ErrNotFound.
var ErrOrderNotFound = fmt.Errorf("%w: order does not exist", domain.ErrNotFound)

// Malformed input. Each wraps domain.ErrInvalid. Malformed IDs are reported
// by domain.ValidateEntityID, which also wraps domain.ErrInvalid.
var (
	ErrInvalidCurrency         = money.ErrInvalidCurrency
	ErrNegativePrice           = fmt.Errorf("%w: unit price must not be negative", domain.ErrInvalid)
	ErrInvalidPaymentReference = fmt.Errorf("%w: payment reference must be 1 to %d characters of text", domain.ErrInvalid, MaxPaymentReferenceLen)
	ErrInvalidReason           = fmt.Errorf("%w: cancellation reason must be at most %d characters of text", domain.ErrInvalid, MaxReasonLen)
	ErrTimeRequired            = fmt.Errorf("%w: time is required", domain.ErrInvalid)
)

// ErrUnknownEvent is returned by Apply for a payload that is not an order
// event. It signals a programming or storage error, not a client mistake, so
// it wraps none of the domain kinds.
var ErrUnknownEvent = errors.New("order: unknown event payload")
