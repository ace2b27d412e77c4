// Package customercmd is the customers module's write side: the customer
// aggregate as the engine's handler takes it, its two commands, each
// guarded on the address it takes (commands.Guarded), and their routes.
package customercmd

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/customers/customer"
	"github.com/strata-es/strata/httpapi"
)

// Aggregate describes a customer to the engine's handler.
var Aggregate = commands.Aggregate[*customer.Customer]{
	Kind:     "customer",
	Stream:   customer.StreamID,
	Load:     customer.Load,
	Version:  func(c *customer.Customer) int64 { return c.Version },
	NotFound: customer.ErrNotFound,
}

// Command is a command on a customer.
type Command = commands.Command[*customer.Customer]

var (
	_ commands.Guarded = Register{}
	_ commands.Guarded = ChangeEmail{}
)

// Register registers a customer with an address no other customer of the
// tenant holds: one command, one stream, no saga and no unique index.
type Register struct {
	Customer string `json:"customer_id"`
	FullName string `json:"name"`
	Email    string `json:"email"`
}

func (Register) Name() string       { return "customer.register" }
func (c Register) Target() string   { return c.Customer }
func (Register) StartsStream() bool { return true }
func (c Register) Guard() event.Query {
	return customer.EmailGuard(c.Email)
}
func (c Register) Admit(matched []event.Payload) error {
	return customer.Free(c.Email, c.Customer, matched)
}
func (c Register) Decide(cu *customer.Customer, now time.Time) ([]event.Payload, error) {
	return cu.Register(c.Customer, c.FullName, c.Email, now)
}

// ChangeEmail moves a customer to an address no other customer holds.
type ChangeEmail struct {
	Customer string `json:"customer_id"`
	Email    string `json:"email"`
}

func (ChangeEmail) Name() string     { return "customer.change_email" }
func (c ChangeEmail) Target() string { return c.Customer }
func (c ChangeEmail) Guard() event.Query {
	return customer.EmailGuard(c.Email)
}
func (c ChangeEmail) Admit(matched []event.Payload) error {
	return customer.Free(c.Email, c.Customer, matched)
}
func (c ChangeEmail) Decide(cu *customer.Customer, now time.Time) ([]event.Payload, error) {
	return cu.ChangeEmail(c.Email, now)
}

// Resource is how customers appear in the command API.
var Resource = commandapi.Resource{IDField: "customer_id"}

// Routes are the customer command routes.
func Routes() []commandapi.Route[*customer.Customer] {
	return []commandapi.Route[*customer.Customer]{
		{Name: "customer.register", Method: http.MethodPost, Path: "/v1/customers/{id}/register", Status: http.StatusCreated, Command: register},
		{Name: "customer.change_email", Method: http.MethodPost, Path: "/v1/customers/{id}/email", Command: changeEmail},
	}
}

// Commands mounts the customer command routes on r (which must
// authenticate): the module's write side.
func Commands(r *mux.Router, d commandapi.Deps) error {
	return commandapi.Mount(r, d, Aggregate, Resource, Routes()...)
}

type (
	registerRequest struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	}
	emailRequest struct {
		Email string `json:"email"`
	}
)

func customerID(r *http.Request) (string, error) { return httpapi.PathID(r, "id", "customer id") }

func register(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := customerID(r)
	if err != nil {
		return nil, err
	}
	var req registerRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if err := commandapi.Required("name", req.Name, "email", req.Email); err != nil {
		return nil, err
	}
	email, err := customer.NormalizeEmail(req.Email)
	if err != nil {
		return nil, err
	}
	return Register{Customer: id, FullName: req.Name, Email: email}, nil
}

func changeEmail(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := customerID(r)
	if err != nil {
		return nil, err
	}
	var req emailRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if err := commandapi.Required("email", req.Email); err != nil {
		return nil, err
	}
	email, err := customer.NormalizeEmail(req.Email)
	if err != nil {
		return nil, err
	}
	return ChangeEmail{Customer: id, Email: email}, nil
}
