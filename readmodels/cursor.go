package readmodels

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/strata-es/strata/domain"
)

// Cursor is a position in the list of orders: the last item of a page.
type Cursor struct {
	CreatedAt time.Time // microsecond precision, as stored
	OrderID   string
}

// ErrBadCursor is returned for a cursor that Encode did not produce.
var ErrBadCursor = errors.New("malformed cursor")

const (
	cursorPrefix = "c1."
	maxCursorLen = 160
)

// Encode returns the opaque form handed to clients as next_cursor.
func (c Cursor) Encode() string {
	raw := strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.OrderID
	return cursorPrefix + base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// ParseCursor is the inverse of Encode; it accepts only canonical cursors.
func ParseCursor(s string) (Cursor, error) {
	if len(s) > maxCursorLen || !strings.HasPrefix(s, cursorPrefix) {
		return Cursor{}, ErrBadCursor
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s[len(cursorPrefix):])
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	micros, id, ok := strings.Cut(string(raw), ".")
	if !ok || domain.ValidateEntityID("order id", id) != nil {
		return Cursor{}, ErrBadCursor
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	c := Cursor{CreatedAt: time.UnixMicro(us).UTC(), OrderID: id}
	if c.Encode() != s {
		return Cursor{}, ErrBadCursor
	}
	return c, nil
}
