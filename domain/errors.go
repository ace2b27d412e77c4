package domain

import "errors"

// Error kinds the edges understand. Specific errors wrap one of these with
// fmt.Errorf("%w: ...") so that the HTTP layer maps them to a status once,
// in one table, without knowing every rule.
var (
	// ErrNotFound: the thing asked for does not exist (or belongs to another
	// tenant, which must be indistinguishable from not existing).
	ErrNotFound = errors.New("not found")
	// ErrRejected: a business rule said no. The message names the rule.
	ErrRejected = errors.New("rejected")
	// ErrInvalid: the input is malformed (bad ID, out-of-range number).
	ErrInvalid = errors.New("invalid")
)
