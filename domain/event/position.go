package event

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Position is a place in the global log, ordered lexicographically by
// (Major, Minor). Stores fill it in their own way:
//
//   - PostgreSQL: Major is the writing transaction's xid8, Minor the row's
//     identity. Readers only advance below the oldest running transaction,
//     so the log never skips an event that commits late.
//   - EventStoreDB: Major is the commit position, Minor the prepare position.
//
// The zero Position is "before the first event".
type Position struct {
	Major uint64
	Minor uint64
}

// ParseColumns reads a Position from its two decimal columns (the
// PostgreSQL tables keep positions as two numeric(20,0) columns, read as
// text).
func ParseColumns(major, minor string) (Position, error) {
	var p Position
	var err error
	if p.Major, err = strconv.ParseUint(major, 10, 64); err != nil {
		return p, fmt.Errorf("position %s/%s: %w", major, minor, err)
	}
	if p.Minor, err = strconv.ParseUint(minor, 10, 64); err != nil {
		return p, fmt.Errorf("position %s/%s: %w", major, minor, err)
	}
	return p, nil
}

// IsZero reports whether p is the start of the log.
func (p Position) IsZero() bool { return p.Major == 0 && p.Minor == 0 }

// Compare returns -1, 0 or +1 as p is before, equal to or after q.
func (p Position) Compare(q Position) int {
	switch {
	case p.Major < q.Major:
		return -1
	case p.Major > q.Major:
		return 1
	case p.Minor < q.Minor:
		return -1
	case p.Minor > q.Minor:
		return 1
	}
	return 0
}

// Less reports whether p is strictly before q.
func (p Position) Less(q Position) bool { return p.Compare(q) < 0 }

func (p Position) String() string { return fmt.Sprintf("%d/%d", p.Major, p.Minor) }

// tokenPrefix versions the token format so it can change without breaking
// clients holding old tokens.
const tokenPrefix = "p1."

// maxTokenLen bounds the work done on hostile input before decoding.
const maxTokenLen = 128

// ErrBadToken is returned for a consistency token that was not made by Token.
var ErrBadToken = errors.New("malformed consistency token")

// Token encodes p as the opaque consistency token given to clients in
// command responses and accepted back in X-Consistency-Token.
func (p Position) Token() string {
	raw := strconv.FormatUint(p.Major, 36) + "." + strconv.FormatUint(p.Minor, 36)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// ParseToken is the inverse of Token. It never panics and rejects anything
// Token could not have produced.
func ParseToken(s string) (Position, error) {
	if len(s) > maxTokenLen || !strings.HasPrefix(s, tokenPrefix) {
		return Position{}, ErrBadToken
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s[len(tokenPrefix):])
	if err != nil {
		return Position{}, ErrBadToken
	}
	major, minor, ok := strings.Cut(string(raw), ".")
	if !ok {
		return Position{}, ErrBadToken
	}
	var p Position
	if p.Major, err = parseBase36(major); err != nil {
		return Position{}, ErrBadToken
	}
	if p.Minor, err = parseBase36(minor); err != nil {
		return Position{}, ErrBadToken
	}
	if p.Token() != s { // canonical form only: no leading zeros, no case variants
		return Position{}, ErrBadToken
	}
	return p, nil
}

func parseBase36(s string) (uint64, error) {
	if s == "" || len(s) > 13 {
		return 0, ErrBadToken
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') {
			return 0, ErrBadToken
		}
	}
	return strconv.ParseUint(s, 36, 64)
}

// A placed token is a Token qualified by the placement whose log issued
// it and that placement's epoch (ARCHITECTURE decision 14):
// "<placement>~<epoch>~<token>". The shared database's tokens carry no
// placement, so tokens handed out before placements existed stay valid.
const placedSep = "~"

// PlacedToken returns p's token as issued by placement at epoch; for
// placement "" it is p.Token().
func PlacedToken(placement string, epoch int64, p Position) string {
	if placement == "" {
		return p.Token()
	}
	return placement + placedSep + strconv.FormatInt(epoch, 10) + placedSep + p.Token()
}

// ParsePlacedToken is the inverse of PlacedToken: placement "" for a token
// of the shared database.
func ParsePlacedToken(s string) (placement string, epoch int64, p Position, err error) {
	if len(s) > 2*maxTokenLen {
		return "", 0, Position{}, ErrBadToken
	}
	if !strings.Contains(s, placedSep) {
		p, err = ParseToken(s)
		return "", 0, p, err
	}
	parts := strings.Split(s, placedSep)
	if len(parts) != 3 || parts[0] == "" || len(parts[0]) > 63 {
		return "", 0, Position{}, ErrBadToken
	}
	for _, c := range parts[0] {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return "", 0, Position{}, ErrBadToken
		}
	}
	epoch, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil || epoch <= 0 || strconv.FormatInt(epoch, 10) != parts[1] {
		return "", 0, Position{}, ErrBadToken
	}
	if p, err = ParseToken(parts[2]); err != nil {
		return "", 0, Position{}, ErrBadToken
	}
	return parts[0], epoch, p, nil
}
