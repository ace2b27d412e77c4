// Package account is the loyalty module's domain: a customer's points
// account, which earns points and redeems them, never below zero. It
// imports the standard library and strata's domain packages only.
package account

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// Stable event type names: part of the stored format, never changed.
const (
	TypeEarned   = "loyalty.earned"
	TypeRedeemed = "loyalty.redeemed"
)

// MaxPoints bounds one command's points and an account's balance, so every
// sum stays exact.
const MaxPoints = 1_000_000_000

// MaxReason bounds an earning's reason, in characters (as the API
// document's maxLength counts them), not bytes.
const MaxReason = 200

// StreamPrefix starts the name of every loyalty stream.
const StreamPrefix = "loyalty-"

// StreamID is the stream of a customer's account.
func StreamID(customer string) string { return StreamPrefix + customer }

// CustomerFromStream is the inverse of StreamID.
func CustomerFromStream(stream string) (string, bool) {
	c, ok := strings.CutPrefix(stream, StreamPrefix)
	return c, ok && c != ""
}

// Errors of the account's rules.
var (
	ErrNotFound      = fmt.Errorf("%w: no loyalty account", domain.ErrNotFound)
	ErrPoints        = fmt.Errorf("%w: points must be from 1 to %d", domain.ErrRejected, MaxPoints)
	ErrInsufficient  = fmt.Errorf("%w: the balance is lower than the points to redeem", domain.ErrRejected)
	ErrOverRedeem    = fmt.Errorf("%w: more points than one redemption may take", domain.ErrRejected)
	ErrBalanceCap    = fmt.Errorf("%w: the balance would exceed %d points", domain.ErrRejected, MaxPoints)
	ErrUnknownEvent  = errors.New("loyalty: unknown event")
	ErrReasonTooLong = fmt.Errorf("%w: a reason is at most %d characters", domain.ErrRejected, MaxReason)
)

// Earned: a customer earned points. Schema version 1.
type Earned struct {
	Customer string    `json:"customer_id"`
	Points   int64     `json:"points"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// Redeemed: a customer spent points. Schema version 1.
type Redeemed struct {
	Customer string    `json:"customer_id"`
	Points   int64     `json:"points"`
	At       time.Time `json:"at"`
}

func (Earned) EventType() string   { return TypeEarned }
func (Redeemed) EventType() string { return TypeRedeemed }

// Codecs describes the loyalty events for an event.Registry.
func Codecs() []event.Codec {
	return []event.Codec{
		{Type: TypeEarned, Version: 1, New: func() event.Payload { return new(Earned) }},
		{Type: TypeRedeemed, Version: 1, New: func() event.Payload { return new(Redeemed) }},
	}
}

// Account is one customer's points, rebuilt from its events.
type Account struct {
	Customer string
	Balance  int64
	Version  int64
}

// Load rebuilds an account from its history.
func Load(history []event.Payload) (*Account, error) {
	a := &Account{}
	for i, p := range history {
		if err := a.Apply(p); err != nil {
			return nil, fmt.Errorf("loyalty: event %d: %w", i+1, err)
		}
	}
	return a, nil
}

// Apply records one past event.
func (a *Account) Apply(p event.Payload) error {
	switch e := p.(type) {
	case Earned:
		a.Customer, a.Balance = e.Customer, a.Balance+e.Points
	case Redeemed:
		a.Customer, a.Balance = e.Customer, a.Balance-e.Points
	default:
		return fmt.Errorf("%w: %T", ErrUnknownEvent, p)
	}
	a.Version++
	return nil
}

// Earn adds points to the customer's account (opening it).
func (a *Account) Earn(customer string, points int64, reason string, at time.Time) ([]event.Payload, error) {
	if err := domain.ValidateEntityID("customer_id", customer); err != nil {
		return nil, err
	}
	if points < 1 || points > MaxPoints {
		return nil, ErrPoints
	}
	if utf8.RuneCountInString(reason) > MaxReason {
		return nil, ErrReasonTooLong
	}
	if a.Balance+points > MaxPoints {
		return nil, ErrBalanceCap
	}
	return []event.Payload{Earned{Customer: customer, Points: points, Reason: reason, At: at.UTC()}}, nil
}

// Redeem takes points from the account: never more than its balance, nor
// than maxPerRedemption (the module's setting; 0: no limit).
func (a *Account) Redeem(points, maxPerRedemption int64, at time.Time) ([]event.Payload, error) {
	if a.Version == 0 {
		return nil, ErrNotFound
	}
	if points < 1 || points > MaxPoints {
		return nil, ErrPoints
	}
	if maxPerRedemption > 0 && points > maxPerRedemption {
		return nil, ErrOverRedeem
	}
	if points > a.Balance {
		return nil, ErrInsufficient
	}
	return []event.Payload{Redeemed{Customer: a.Customer, Points: points, At: at.UTC()}}, nil
}
