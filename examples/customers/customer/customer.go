// Package customer is the customers module's domain: a customer, known by
// an e-mail address no other customer of the tenant holds. The rule spans
// customers, so it is not the aggregate's: each event names the addresses
// it takes or gives up in its tags (EmailTag), and the commands guard on
// them (customercmd). It imports the standard library and strata's domain
// packages only.
package customer

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// Stable event type names: part of the stored format, never changed.
const (
	TypeRegistered   = "customer.registered"
	TypeEmailChanged = "customer.email_changed"
)

// StreamPrefix starts the name of every customer stream.
const StreamPrefix = "customer-"

// StreamID is the stream of a customer.
func StreamID(id string) string { return StreamPrefix + id }

// MaxName bounds a customer's name, in characters.
const MaxName = 200

// Erased is what a forgotten customer's name and address read as.
const Erased = "erased"

// Errors of the customer's rules.
var (
	ErrNotFound     = fmt.Errorf("%w: no such customer", domain.ErrNotFound)
	ErrRegistered   = fmt.Errorf("%w: the customer is registered already", domain.ErrRejected)
	ErrEmailTaken   = fmt.Errorf("%w: another customer has this e-mail address", domain.ErrRejected)
	ErrEmail        = fmt.Errorf("%w: not an e-mail address", domain.ErrInvalid)
	ErrName         = fmt.Errorf("%w: a name is 1 to %d characters", domain.ErrInvalid, MaxName)
	ErrUnknownEvent = errors.New("customer: unknown event")
)

// Registered: a customer registered with an address. Schema version 1.
type Registered struct {
	Customer string    `json:"customer_id"`
	Name     string    `json:"name"`
	Email    string    `json:"email"`
	At       time.Time `json:"at"`
}

// EmailChanged: a customer gave up one address for another. Schema
// version 1.
type EmailChanged struct {
	Customer string    `json:"customer_id"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	At       time.Time `json:"at"`
}

func (Registered) EventType() string   { return TypeRegistered }
func (EmailChanged) EventType() string { return TypeEmailChanged }

// Codecs describes the customer events for an event.Registry. A customer
// is their own data subject: their name and addresses are sealed with
// their key, and their tags are digests (event.TagDigest), never the
// addresses.
func Codecs() []event.Codec {
	erased := event.Erased(Erased)
	return []event.Codec{
		{Type: TypeRegistered, Version: 1, New: func() event.Payload { return new(Registered) },
			Tags: func(p event.Payload) []string { return []string{EmailTag(p.(Registered).Email)} },
			Personal: &event.Personal{Subject: "customer_id", Fields: []event.PersonalField{
				{Name: "name", Tombstone: erased}, {Name: "email", Tombstone: erased}}}},
		{Type: TypeEmailChanged, Version: 1, New: func() event.Payload { return new(EmailChanged) },
			Tags: func(p event.Payload) []string {
				e := p.(EmailChanged)
				return []string{EmailTag(e.From), EmailTag(e.To)}
			},
			Personal: &event.Personal{Subject: "customer_id", Fields: []event.PersonalField{
				{Name: "from", Tombstone: erased}, {Name: "to", Tombstone: erased}}}},
	}
}

// emailPattern is the document's EmailAddress pattern: a bare address,
// no display name, a dot in the domain.
var emailPattern = regexp.MustCompile(`^[^\s<>()@,;:"\[\]\\]+@[^\s<>()@,;:"\[\]\\]+\.[^\s<>()@,;:"\[\]\\]+$`)

// NormalizeEmail returns the address as the rule compares it (the domain
// in lower case, the local part as given), or ErrEmail.
func NormalizeEmail(s string) (string, error) {
	if n := utf8.RuneCountInString(s); n < 3 || n > 254 || !emailPattern.MatchString(s) {
		return "", ErrEmail
	}
	local, dom, _ := strings.Cut(s, "@")
	return local + "@" + strings.ToLower(dom), nil
}

// EmailTag is the tag of the events that take or give up an address.
func EmailTag(email string) string { return event.TagDigest("email", email) }

// EmailGuard is the query of the events about an address.
func EmailGuard(email string) event.Query { return event.Query{{Tags: []string{EmailTag(email)}}} }

// Holder returns who holds the address after the events about it (those
// matching EmailGuard, in log order): "" when nobody does. A forgotten
// customer's events read Erased, so their address is free again.
func Holder(email string, matched []event.Payload) string {
	holder := ""
	for _, p := range matched {
		switch e := p.(type) {
		case Registered:
			if e.Email == email {
				holder = e.Customer
			}
		case EmailChanged:
			if e.To == email {
				holder = e.Customer
			} else if e.From == email && holder == e.Customer {
				holder = ""
			}
		}
	}
	return holder
}

// Free returns nil when the address is nobody's or already customer's
// after the events about it, and ErrEmailTaken otherwise: the rule both
// commands guard.
func Free(email, customer string, matched []event.Payload) error {
	if h := Holder(email, matched); h != "" && h != customer {
		return ErrEmailTaken
	}
	return nil
}

// Customer is one customer, rebuilt from their events.
type Customer struct {
	ID      string
	Email   string
	Version int64
}

// Load rebuilds a customer from their history.
func Load(history []event.Payload) (*Customer, error) {
	c := &Customer{}
	for i, p := range history {
		switch e := p.(type) {
		case Registered:
			c.ID, c.Email = e.Customer, e.Email
		case EmailChanged:
			c.Email = e.To
		default:
			return nil, fmt.Errorf("customer: event %d: %w: %T", i+1, ErrUnknownEvent, p)
		}
		c.Version++
	}
	return c, nil
}

// Register registers a new customer; the address is checked free by the
// command's guard, not here.
func (c *Customer) Register(id, name, email string, at time.Time) ([]event.Payload, error) {
	if c.Version > 0 {
		return nil, ErrRegistered
	}
	if err := domain.ValidateEntityID("customer_id", id); err != nil {
		return nil, err
	}
	if n := utf8.RuneCountInString(name); n < 1 || n > MaxName {
		return nil, ErrName
	}
	return []event.Payload{Registered{Customer: id, Name: name, Email: email, At: at}}, nil
}

// ChangeEmail moves the customer to another address; the same one again
// changes nothing.
func (c *Customer) ChangeEmail(email string, at time.Time) ([]event.Payload, error) {
	if c.Version == 0 {
		return nil, ErrNotFound
	}
	if email == c.Email {
		return nil, nil
	}
	return []event.Payload{EmailChanged{Customer: c.ID, From: c.Email, To: email, At: at}}, nil
}
