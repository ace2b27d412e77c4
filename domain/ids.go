package domain

import (
	"fmt"
	"regexp"
)

var entityIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ValidateEntityID checks an order, customer or product ID against
// [A-Za-z0-9._-]{1,64}. what names the field for the error message.
func ValidateEntityID(what, id string) error {
	if !entityIDPattern.MatchString(id) {
		return fmt.Errorf("%w: %s must match [A-Za-z0-9._-]{1,64}", ErrInvalid, what)
	}
	return nil
}
