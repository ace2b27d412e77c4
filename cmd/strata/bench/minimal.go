package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/orders/orderquery"
)

// The minimal handler is the baseline of the HTTP workloads: what a
// request costs with nothing of strata around it. It is a net/http server
// with pgx, run as a process of its own like `strata serve`, on the same
// database, as the same login (strata_app_login, pool of 8), and does per
// request the work the request needs and nothing else: it verifies the
// HS256 token (signature, expiry, tenant claim), sends the tenant's
// set_config and the statement in one pipelined round trip (one implicit
// transaction, as strata's query path does) and writes JSON.
//
//   - GET /v1/orders/{id}: orderquery.OrderSQL, the statement of strata's
//     order read model query, rows scanned into the same JSON.
//   - POST /v1/orders: decodes and checks the body, inserts one
//     order.created event into public.raw_events (a copy of strata.events,
//     its indexes and defaults included, without row-level security or
//     triggers), one transaction per request, and answers 201 with the
//     order ID, version 1 and the position token.
//
// Everything strata adds is the difference: routing, middleware (request
// IDs, metrics, tracing hooks, limits), the tenant directory, idempotency,
// the aggregate, the codec, group commit, the OpenAPI-shaped errors.

// minimalArgs is the hidden mode `strata bench minimal-handler`.
const minimalArgs = "minimal-handler"

// runMinimalHandler serves the minimal handler on --addr until SIGTERM,
// with DATABASE_URL (an owner URL; it logs in as strata_app_login) and
// STRATA_JWT_SECRET from the environment.
func runMinimalHandler(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench minimal-handler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	login, err := db.LoginURL(os.Getenv("DATABASE_URL"), db.LoginApp)
	if err != nil {
		fmt.Fprintln(stderr, "minimal handler:", err)
		return exitFailure
	}
	pool, err := db.OpenPool(ctx, login, db.PoolConfig{Role: db.RoleApp, MaxConns: 8})
	if err != nil {
		fmt.Fprintln(stderr, "minimal handler:", err)
		return exitFailure
	}
	defer pool.Close()
	srv := &http.Server{Handler: newMinimalHandler(pool, []byte(os.Getenv("STRATA_JWT_SECRET"))),
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(stderr, "minimal handler:", err)
		return exitFailure
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "minimal handler:", err)
		return exitFailure
	}
	return exitOK
}

type minimalHandler struct {
	pool   *pgxpool.Pool
	secret []byte
	parser *jwt.Parser
}

func newMinimalHandler(pool *pgxpool.Pool, secret []byte) http.Handler {
	h := &minimalHandler{pool: pool, secret: secret,
		parser: jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/orders/{id}", h.getOrder)
	mux.HandleFunc("POST /v1/orders", h.createOrder)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

type minimalClaims struct {
	jwt.RegisteredClaims
	Tenant string `json:"tenant"`
}

func (h *minimalHandler) tenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	var c minimalClaims
	if ok {
		_, err := h.parser.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return h.secret, nil })
		ok = err == nil && c.Tenant != ""
	}
	if !ok {
		minimalError(w, http.StatusUnauthorized, "unauthenticated")
		return "", false
	}
	return c.Tenant, true
}

func minimalError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"error":{"code":%q}}`, code)
}

func minimalJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

type minimalMoney struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

type minimalLine struct {
	ProductID string       `json:"product_id"`
	Quantity  int64        `json:"quantity"`
	UnitPrice minimalMoney `json:"unit_price"`
	LineTotal minimalMoney `json:"line_total"`
}

type minimalOrder struct {
	OrderID     string        `json:"order_id"`
	CustomerID  string        `json:"customer_id"`
	Status      string        `json:"status"`
	Currency    string        `json:"currency"`
	Lines       []minimalLine `json:"lines"`
	Total       minimalMoney  `json:"total"`
	Version     int64         `json:"version"`
	CreatedAt   time.Time     `json:"created_at"`
	PlacedAt    *time.Time    `json:"placed_at"`
	PaidAt      *time.Time    `json:"paid_at"`
	CancelledAt *time.Time    `json:"cancelled_at"`
}

func (h *minimalHandler) getOrder(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.tenant(w, r)
	if !ok {
		return
	}
	var o minimalOrder
	found := false
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(orderquery.OrderSQL, tenant, r.PathValue("id")).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var product, lineCurrency *string
			var qty, unit, lineTotal *int64
			if err := rows.Scan(&o.OrderID, &o.CustomerID, &o.Status, &o.Currency, &o.Total.Amount, &o.Version,
				&o.CreatedAt, &o.PlacedAt, &o.PaidAt, &o.CancelledAt, &product, &qty, &unit, &lineCurrency, &lineTotal); err != nil {
				return err
			}
			found = true
			if product != nil {
				o.Lines = append(o.Lines, minimalLine{ProductID: *product, Quantity: *qty,
					UnitPrice: minimalMoney{*unit, *lineCurrency}, LineTotal: minimalMoney{*lineTotal, *lineCurrency}})
			}
		}
		return rows.Err()
	})
	if err := h.pool.SendBatch(r.Context(), b).Close(); err != nil {
		minimalError(w, http.StatusInternalServerError, "internal")
		return
	}
	if !found {
		minimalError(w, http.StatusNotFound, "not_found")
		return
	}
	o.Total.Currency = o.Currency
	minimalJSON(w, http.StatusOK, o)
}

type minimalCreate struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Currency   string `json:"currency"`
}

func (h *minimalHandler) createOrder(w http.ResponseWriter, r *http.Request) {
	tenant, ok := h.tenant(w, r)
	if !ok {
		return
	}
	var req minimalCreate
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.OrderID == "" || req.CustomerID == "" || len(req.Currency) != 3 {
		minimalError(w, http.StatusBadRequest, "invalid_request")
		return
	}
	data, _ := json.Marshal(map[string]any{"order_id": req.OrderID, "customer_id": req.CustomerID, "currency": req.Currency,
		"created_at": time.Now().UTC()})
	var txText string
	var pos int64
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(`INSERT INTO public.raw_events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
		VALUES ($1, $2, 1, gen_random_uuid(), 'order.created', 1, $3, $4) RETURNING tx_id::text, position`,
		tenant, "order-"+req.OrderID, data, benchMetaJSON).QueryRow(func(row pgx.Row) error { return row.Scan(&txText, &pos) })
	if err := h.pool.SendBatch(r.Context(), b).Close(); err != nil {
		if db.SQLState(err) == "23505" {
			minimalError(w, http.StatusConflict, "conflict")
			return
		}
		minimalError(w, http.StatusInternalServerError, "internal")
		return
	}
	major, _ := strconv.ParseUint(txText, 10, 64)
	minimalJSON(w, http.StatusCreated, map[string]any{"order_id": req.OrderID, "version": 1,
		"position": event.Position{Major: major, Minor: uint64(pos)}.Token()})
}
