package stock

import (
	"errors"
	"fmt"

	"github.com/strata-es/strata/domain"
)

// Rejections: a business rule said no. Each wraps domain.ErrRejected and
// names the rule in plain words (it reaches API clients).
var (
	ErrInsufficientStock   = fmt.Errorf("%w: not enough stock is available for the reservation", domain.ErrRejected)
	ErrReservationReused   = fmt.Errorf("%w: the reservation ID was used before for another reservation of this SKU", domain.ErrRejected)
	ErrReservationNotFound = fmt.Errorf("%w: no reservation of this SKU has that ID", domain.ErrRejected)
	ErrAlreadyReleased     = fmt.Errorf("%w: the reservation was released: it can no longer be committed", domain.ErrRejected)
	ErrAlreadyCommitted    = fmt.Errorf("%w: the reservation was committed: it can no longer be released", domain.ErrRejected)
	ErrStockOverflow       = fmt.Errorf("%w: the stock of one SKU may not exceed %d units", domain.ErrRejected, MaxStock)
	ErrTransferToItself    = fmt.Errorf("%w: a transfer moves units to another SKU", domain.ErrRejected)
)

// ErrItemNotFound: a command with If-Match on a SKU that has no events.
var ErrItemNotFound = fmt.Errorf("%w: inventory item does not exist", domain.ErrNotFound)

// Malformed input. Each wraps domain.ErrInvalid.
var (
	ErrQuantityOutOfRange = fmt.Errorf("%w: quantity must be between 1 and %d", domain.ErrInvalid, MaxQuantity)
	ErrTimeRequired       = fmt.Errorf("%w: time is required", domain.ErrInvalid)
)

// ErrUnknownEvent is returned by Apply for a payload that is not an
// inventory event: a programming or storage error.
var ErrUnknownEvent = errors.New("inventory: unknown event payload")
