package stockcmd

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/httpapi"
)

// Resource is how inventory items appear in the command API.
var Resource = commandapi.Resource{IDField: "sku"}

// Request bodies. Field names are the API contract.
type (
	quantityRequest struct {
		Quantity int64 `json:"quantity"`
	}
	reserveRequest struct {
		ReservationID string `json:"reservation_id"`
		Quantity      int64  `json:"quantity"`
	}
	reservationRequest struct {
		ReservationID string `json:"reservation_id"`
	}
	transferRequest struct {
		To         string `json:"to_sku"`
		TransferID string `json:"transfer_id"`
		Quantity   int64  `json:"quantity"`
	}
)

// Routes are the inventory command routes.
func Routes() []commandapi.Route[*stock.Item] {
	return []commandapi.Route[*stock.Item]{
		{Name: "inventory.receive", Method: http.MethodPost, Path: "/v1/inventory/{sku}/receive", Command: receive},
		{Name: "inventory.reserve", Method: http.MethodPost, Path: "/v1/inventory/{sku}/reserve", Command: reserve},
		{Name: "inventory.release", Method: http.MethodPost, Path: "/v1/inventory/{sku}/release", Command: release},
		{Name: "inventory.commit", Method: http.MethodPost, Path: "/v1/inventory/{sku}/commit", Command: commit},
	}
}

// SpanRoutes are the inventory routes over several items.
func SpanRoutes() []commandapi.SpanRoute {
	return []commandapi.SpanRoute{
		{Name: "inventory.transfer", Method: http.MethodPost, Path: "/v1/inventory/{sku}/transfer", Command: transfer},
	}
}

// Commands mounts the inventory command routes on r (which must
// authenticate): the module's write side.
func Commands(r *mux.Router, d commandapi.Deps) error {
	if err := commandapi.MountSpanning(r, d, Resource, SpanRoutes()...); err != nil {
		return err
	}
	return commandapi.Mount(r, d, Aggregate, Resource, Routes()...)
}

func sku(r *http.Request) (string, error) { return httpapi.PathID(r, "sku", "sku") }

func receive(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := sku(r)
	if err != nil {
		return nil, err
	}
	var req quantityRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	return Receive{SKU: id, Quantity: req.Quantity}, nil
}

func reserve(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, err := sku(r)
	if err != nil {
		return nil, err
	}
	var req reserveRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if err := commandapi.Required("reservation_id", req.ReservationID); err != nil {
		return nil, err
	}
	return Reserve{SKU: id, ReservationID: req.ReservationID, Quantity: req.Quantity}, nil
}

func release(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, res, err := reservation(w, r)
	if err != nil {
		return nil, err
	}
	return Release{SKU: id, ReservationID: res}, nil
}

func commit(w http.ResponseWriter, r *http.Request) (Command, error) {
	id, res, err := reservation(w, r)
	if err != nil {
		return nil, err
	}
	return Commit{SKU: id, ReservationID: res}, nil
}

func reservation(w http.ResponseWriter, r *http.Request) (string, string, error) {
	id, err := sku(r)
	if err != nil {
		return "", "", err
	}
	var req reservationRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return "", "", err
	}
	return id, req.ReservationID, commandapi.Required("reservation_id", req.ReservationID)
}

func transfer(w http.ResponseWriter, r *http.Request) (commands.SpanningCommand, error) {
	id, err := sku(r)
	if err != nil {
		return nil, err
	}
	var req transferRequest
	if err := commandapi.DecodeBody(w, r, &req); err != nil {
		return nil, err
	}
	if err := commandapi.Required("to_sku", req.To, "transfer_id", req.TransferID); err != nil {
		return nil, err
	}
	if err := domain.ValidateEntityID("to_sku", req.To); err != nil {
		return nil, err
	}
	return Transfer{SKU: id, To: req.To, TransferID: req.TransferID, Quantity: req.Quantity}, nil
}
