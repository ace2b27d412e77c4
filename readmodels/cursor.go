package readmodels

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/strata-es/strata/domain"
)

// Cursor is a position in a list kept newest first by (time, key): the
// last item of a page, for keyset pagination (WHERE (t, key) < (c.At,
// c.Key) ORDER BY t DESC, key DESC). Key is an entity ID. A list ordered
// by key alone leaves At zero.
type Cursor struct {
	At  time.Time // microsecond precision, as stored
	Key string
}

// ErrBadCursor is returned for a cursor that Encode did not produce.
var ErrBadCursor = errors.New("malformed cursor")

const (
	cursorPrefix = "c1."
	maxCursorLen = 160
)

// Encode returns the opaque form handed to clients as next_cursor.
func (c Cursor) Encode() string {
	raw := strconv.FormatInt(c.At.UnixMicro(), 10) + "." + c.Key
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
	if !ok || domain.ValidateEntityID("cursor key", id) != nil {
		return Cursor{}, ErrBadCursor
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return Cursor{}, ErrBadCursor
	}
	c := Cursor{At: time.UnixMicro(us).UTC(), Key: id}
	if c.Encode() != s {
		return Cursor{}, ErrBadCursor
	}
	return c, nil
}
