// Package accountcmd is the loyalty module's write side: the account
// aggregate as the engine's handler takes it, its commands and their HTTP
// routes.
package accountcmd

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/httpapi"

	"example.com/loyalty/account"
)

// Registry holds the loyalty events (the module's own tests use it).
var Registry = event.NewRegistry(account.Codecs()...)

// Aggregate describes a customer's account to the engine's handler.
var Aggregate = commands.Aggregate[*account.Account]{
	Kind:     "loyalty account",
	Stream:   account.StreamID,
	Load:     account.Load,
	Version:  func(a *account.Account) int64 { return a.Version },
	NotFound: account.ErrNotFound,
}

// Command is a command on an account.
type Command = commands.Command[*account.Account]

// Earn adds points.
type Earn struct {
	Customer string `json:"customer_id"`
	Points   int64  `json:"points"`
	Reason   string `json:"reason,omitempty"`
}

func (Earn) Name() string       { return "loyalty.earn" }
func (c Earn) Target() string   { return c.Customer }
func (Earn) StartsStream() bool { return true }
func (c Earn) Decide(a *account.Account, now time.Time) ([]event.Payload, error) {
	return a.Earn(c.Customer, c.Points, c.Reason, now)
}

// Redeem spends points, at most MaxPerRedemption at once (the module's
// setting LOYALTY_MAX_REDEEM; 0: no limit).
type Redeem struct {
	Customer         string `json:"customer_id"`
	Points           int64  `json:"points"`
	MaxPerRedemption int64  `json:"-"`
}

func (Redeem) Name() string     { return "loyalty.redeem" }
func (c Redeem) Target() string { return c.Customer }
func (c Redeem) Decide(a *account.Account, now time.Time) ([]event.Payload, error) {
	return a.Redeem(c.Points, c.MaxPerRedemption, now)
}

// SettingMaxRedeem names the module's one setting.
const SettingMaxRedeem = "LOYALTY_MAX_REDEEM"

// Resource is how accounts appear in the command API.
var Resource = commandapi.Resource{IDField: "customer_id"}

type earnRequest struct {
	Points int64  `json:"points"`
	Reason string `json:"reason"`
}

type redeemRequest struct {
	Points int64 `json:"points"`
}

// Commands mounts the loyalty routes on r; maxRedeem is the setting's
// value ("" or "0": no limit).
func Commands(r *mux.Router, d commandapi.Deps, maxRedeem string) error {
	max, err := strconv.ParseInt("0"+maxRedeem, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q: want a non-negative integer", SettingMaxRedeem, maxRedeem)
	}
	return commandapi.Mount(r, d, Aggregate, Resource,
		commandapi.Route[*account.Account]{Name: "loyalty.earn", Method: http.MethodPost, Path: "/v1/loyalty/{customer}/earn",
			Command: func(w http.ResponseWriter, r *http.Request) (Command, error) {
				id, err := httpapi.PathID(r, "customer", "customer_id")
				if err != nil {
					return nil, err
				}
				var req earnRequest
				if err := commandapi.DecodeBody(w, r, &req); err != nil {
					return nil, err
				}
				if err := points(req.Points); err != nil {
					return nil, err
				}
				if utf8.RuneCountInString(req.Reason) > account.MaxReason {
					return nil, httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, fmt.Sprintf("reason must be at most %d characters", account.MaxReason))
				}
				return Earn{Customer: id, Points: req.Points, Reason: req.Reason}, nil
			}},
		commandapi.Route[*account.Account]{Name: "loyalty.redeem", Method: http.MethodPost, Path: "/v1/loyalty/{customer}/redeem",
			Command: func(w http.ResponseWriter, r *http.Request) (Command, error) {
				id, err := httpapi.PathID(r, "customer", "customer_id")
				if err != nil {
					return nil, err
				}
				var req redeemRequest
				if err := commandapi.DecodeBody(w, r, &req); err != nil {
					return nil, err
				}
				if err := points(req.Points); err != nil {
					return nil, err
				}
				return Redeem{Customer: id, Points: req.Points, MaxPerRedemption: max}, nil
			}},
	)
}

// points refuses, as malformed input (400, as the module's OpenAPI
// fragment's minimum and maximum say), points outside 1..MaxPoints; the
// account's ErrPoints stays for callers that are not the API.
func points(n int64) error {
	if n < 1 || n > account.MaxPoints {
		return httpapi.Errorf(http.StatusBadRequest, httpapi.CodeInvalidRequest, fmt.Sprintf("points must be from 1 to %d", account.MaxPoints))
	}
	return nil
}
