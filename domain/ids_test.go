package domain

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateEntityID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "o-1", "A.b_c-9", "...", ".a", "a.", "..a", strings.Repeat("x", 64)} {
		if err := ValidateEntityID("order id", id); err != nil {
			t.Errorf("ValidateEntityID(%q) = %v, want nil", id, err)
		}
	}
	// "." and ".." are dot-segments: /v1/orders/../place is /v1/place to
	// every client and router, so such an order could never be addressed.
	for _, id := range []string{".", "..", "", "a/b", "a b", "a%2Fb", strings.Repeat("x", 65), "é"} {
		err := ValidateEntityID("order id", id)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateEntityID(%q) = %v, want ErrInvalid", id, err)
		}
	}
}
