package domain

import (
	"fmt"
	"regexp"
)

var entityIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidateEntityID checks an order, customer or product ID against
// [A-Za-z0-9._-]{1,64}, except "." and "..": IDs are path segments
// (/v1/orders/{id}/place), and those two are dot-segments that a client or
// router resolves away, so such an order could be created and never
// addressed again. what names the field for the error message.
func ValidateEntityID(what, id string) error {
	if !entityIDPattern.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("%w: %s must match [A-Za-z0-9._-]{1,64} and not be . or ..", ErrInvalid, what)
	}
	return nil
}
