package paysim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"
)

// Key statuses in the ledger.
const (
	StatusCaptured   = "captured"   // the money is taken
	StatusDeclined   = "declined"   // refused; the same key is refused again
	StatusReversed   = "reversed"   // captured, then voided: the money is returned
	StatusTombstoned = "tombstoned" // voided before any capture: a capture with the key is refused
)

// Entry kinds in the ledger.
const (
	EntryCapture = "capture"
	EntryDecline = "decline"
	EntryVoid    = "void"
)

// Faults are how the server misbehaves. Rates are probabilities in [0, 1],
// drawn per request from the seed, the operation, the key and the key's
// attempt number (so the n-th attempt of a key meets the same fault in
// every run).
type Faults struct {
	// Delay makes every answer this late.
	Delay time.Duration
	// FailRate: answer 503 without any effect.
	FailRate float64
	// TimeoutRate: hold the request for Hold (or until the client gives
	// up) without any effect, then answer 504.
	TimeoutRate float64
	Hold        time.Duration // default 1 minute
	// DropRate: apply the request (record the capture or the void), then
	// close the connection without an answer.
	DropRate float64
	// DeclineRate: a capture with a new key is declined (402). Drawn per
	// key, not per attempt: the same key always gets the same answer.
	DeclineRate float64
	// DeclineOrders are declined whatever the rate.
	DeclineOrders []string
}

// Config is a simulator's seed and initial faults.
type Config struct {
	Seed   uint64
	Faults Faults
}

// Entry is one effect in the ledger, in the order they happened.
type Entry struct {
	Seq       int    `json:"seq"`
	Kind      string `json:"kind"` // EntryCapture, EntryDecline, EntryVoid
	Key       string `json:"key"`
	OrderID   string `json:"order_id,omitempty"`
	Amount    int64  `json:"amount,omitempty"`
	Currency  string `json:"currency,omitempty"`
	CaptureID string `json:"capture_id,omitempty"`
	Status    string `json:"status"` // the key's status after the effect
}

// Key is where one idempotency key is.
type Key struct {
	Key       string `json:"key"`
	Status    string `json:"status"`
	OrderID   string `json:"order_id,omitempty"`
	Amount    int64  `json:"amount,omitempty"`
	Currency  string `json:"currency,omitempty"`
	CaptureID string `json:"capture_id,omitempty"`
}

// Ledger is every effect and every key's status. Requests refused by a
// fault (503, held) have no effect and are not in it; they are counted.
type Ledger struct {
	Entries []Entry `json:"entries"`
	Keys    []Key   `json:"keys"` // sorted by key
	// Requests counts every request received, Faults those answered by a
	// fault (503, held, dropped), Replays captures answered from an
	// existing key.
	Requests int `json:"requests"`
	Faults   int `json:"faults"`
	Replays  int `json:"replays"`
}

// Kept returns how many captures of orderID keep the money (captured and
// not reversed): the chaos invariant is exactly one for a paid order and
// none for a cancelled one.
func (l Ledger) Kept(orderID string) int {
	n := 0
	for _, k := range l.Keys {
		if k.OrderID == orderID && k.Status == StatusCaptured {
			n++
		}
	}
	return n
}

// Captures returns how many capture entries the ledger holds for orderID
// (reversed ones included).
func (l Ledger) Captures(orderID string) int {
	n := 0
	for _, e := range l.Entries {
		if e.OrderID == orderID && e.Kind == EntryCapture {
			n++
		}
	}
	return n
}

// Server is one simulated provider. The zero value is not usable: New.
type Server struct {
	seed uint64

	mu       sync.Mutex
	faults   Faults
	keys     map[string]*Key
	entries  []Entry
	attempts map[string]int
	requests int
	faulted  int
	replays  int

	srv *httptest.Server
}

// New returns a simulator that is not listening (serve Handler yourself).
func New(cfg Config) *Server {
	return &Server{seed: cfg.Seed, faults: cfg.Faults, keys: map[string]*Key{}, attempts: map[string]int{}}
}

// Start returns a simulator listening on a loopback port (URL); Close
// stops it.
func Start(cfg Config) *Server {
	s := New(cfg)
	s.srv = httptest.NewServer(s.Handler())
	return s
}

// URL is the base URL of a started simulator.
func (s *Server) URL() string { return s.srv.URL }

// Close stops a started simulator, cutting the connections it holds.
func (s *Server) Close() {
	if s.srv != nil {
		s.srv.CloseClientConnections()
		s.srv.Close()
	}
}

// SetFaults replaces the faults from the next request on.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Ledger returns a copy of the ledger.
func (s *Server) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := Ledger{Entries: slices.Clone(s.entries), Requests: s.requests, Faults: s.faulted, Replays: s.replays}
	for _, k := range s.keys {
		l.Keys = append(l.Keys, *k)
	}
	slices.SortFunc(l.Keys, func(a, b Key) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	if l.Entries == nil {
		l.Entries = []Entry{}
	}
	if l.Keys == nil {
		l.Keys = []Key{}
	}
	return l
}

// Handler serves the capture API:
//
//	POST /v1/captures               Idempotency-Key; {order_id, amount, currency}
//	POST /v1/captures/{key}/void
//	GET  /v1/ledger
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/captures", s.capture)
	mux.HandleFunc("POST /v1/captures/{key}/void", s.void)
	mux.HandleFunc("GET /v1/ledger", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Ledger()) })
	return mux
}

// CaptureRequest is the body of POST /v1/captures.
type CaptureRequest struct {
	OrderID  string `json:"order_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// CaptureResponse is the body of a 201 (and of a replayed capture).
type CaptureResponse struct {
	CaptureID string `json:"capture_id"`
	Status    string `json:"status"`
}

// VoidResponse is the body of a void's 200.
type VoidResponse struct {
	Key       string `json:"key"`
	Status    string `json:"status"`
	CaptureID string `json:"capture_id,omitempty"`
}

// MaxKeyLen is the longest Idempotency-Key accepted.
const MaxKeyLen = 255

func (s *Server) capture(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > MaxKeyLen {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("Idempotency-Key is required (1 to %d bytes)", MaxKeyLen))
		return
	}
	var req CaptureRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.OrderID == "" || req.Amount < 0 || len(req.Currency) != 3 {
		writeError(w, http.StatusBadRequest, "invalid_request", "body must be {order_id, amount >= 0, currency}")
		return
	}
	f, fault := s.admit(w, r, "capture", key)
	if fault {
		return
	}
	s.mu.Lock()
	k, seen := s.keys[key]
	var status int
	var body any
	switch {
	case !seen && (slices.Contains(f.DeclineOrders, req.OrderID) || s.draw("decline", key, 0) < f.DeclineRate):
		k = &Key{Key: key, Status: StatusDeclined, OrderID: req.OrderID, Amount: req.Amount, Currency: req.Currency}
		s.keys[key] = k
		s.record(EntryDecline, k)
		status, body = http.StatusPaymentRequired, errorBody("declined", "the payment was declined")
	case !seen:
		sum := sha256.Sum256([]byte(key))
		k = &Key{Key: key, Status: StatusCaptured, OrderID: req.OrderID, Amount: req.Amount, Currency: req.Currency,
			CaptureID: "cap_" + hex.EncodeToString(sum[:8])}
		s.keys[key] = k
		s.record(EntryCapture, k)
		status, body = http.StatusCreated, CaptureResponse{CaptureID: k.CaptureID, Status: k.Status}
	case k.Status == StatusTombstoned || k.Status == StatusReversed:
		status, body = http.StatusConflict, errorBody("voided", "the capture under this key was voided")
	case k.OrderID != req.OrderID || k.Amount != req.Amount || k.Currency != req.Currency:
		status, body = http.StatusUnprocessableEntity, errorBody("idempotency_mismatch", "the key was used for another capture")
	case k.Status == StatusDeclined:
		s.replays++
		status, body = http.StatusPaymentRequired, errorBody("declined", "the payment was declined")
	default:
		s.replays++
		status, body = http.StatusCreated, CaptureResponse{CaptureID: k.CaptureID, Status: k.Status}
	}
	s.mu.Unlock()
	s.answer(w, f, "capture", key, status, body)
}

func (s *Server) void(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if key == "" || len(key) > MaxKeyLen {
		writeError(w, http.StatusBadRequest, "invalid_request", "the capture key is required")
		return
	}
	f, fault := s.admit(w, r, "void", key)
	if fault {
		return
	}
	s.mu.Lock()
	k, seen := s.keys[key]
	switch {
	case !seen:
		k = &Key{Key: key, Status: StatusTombstoned}
		s.keys[key] = k
		s.record(EntryVoid, k)
	case k.Status == StatusCaptured:
		k.Status = StatusReversed
		s.record(EntryVoid, k)
	}
	body := VoidResponse{Key: key, Status: k.Status, CaptureID: k.CaptureID}
	s.mu.Unlock()
	s.answer(w, f, "void", key, http.StatusOK, body)
}

// admit counts the request and applies the faults that come before any
// effect (delay, 503, hold). fault true: the request is answered.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, op, key string) (Faults, bool) {
	s.mu.Lock()
	f := s.faults
	s.requests++
	n := s.attempts[op+"\x00"+key]
	s.attempts[op+"\x00"+key] = n + 1
	u := s.draw(op, key, n)
	s.mu.Unlock()
	if f.Delay > 0 {
		sleep(r.Context(), f.Delay)
	}
	switch {
	case u < f.FailRate:
		s.fault()
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the provider is unavailable, try again")
		return f, true
	case u < f.FailRate+f.TimeoutRate:
		s.fault()
		hold := f.Hold
		if hold <= 0 {
			hold = time.Minute
		}
		sleep(r.Context(), hold)
		writeError(w, http.StatusGatewayTimeout, "timeout", "the provider timed out, try again")
		return f, true
	}
	return f, false
}

func (s *Server) fault() {
	s.mu.Lock()
	s.faulted++
	s.mu.Unlock()
}

// answer writes the response, or drops it (closes the connection without
// one) when the draw says so: the effect has happened either way.
func (s *Server) answer(w http.ResponseWriter, f Faults, op, key string, status int, body any) {
	s.mu.Lock()
	n := s.attempts[op+"\x00"+key]
	u := s.draw(op+"/drop", key, n)
	s.mu.Unlock()
	if u < f.DropRate {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				s.fault()
				conn.Close()
				return
			}
		}
	}
	writeJSON(w, status, body)
}

// record appends an effect to the ledger (mu held).
func (s *Server) record(kind string, k *Key) {
	s.entries = append(s.entries, Entry{Seq: len(s.entries) + 1, Kind: kind, Key: k.Key, OrderID: k.OrderID, Amount: k.Amount,
		Currency: k.Currency, CaptureID: k.CaptureID, Status: k.Status})
}

// draw is a number in [0, 1) from the seed, the operation, the key and the
// attempt: deterministic whatever the order requests arrive in.
func (s *Server) draw(op, key string, attempt int) float64 {
	h := sha256.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], s.seed)
	binary.BigEndian.PutUint64(b[8:], uint64(attempt))
	h.Write(b[:])
	h.Write([]byte(op + "\x00" + key))
	return float64(binary.BigEndian.Uint64(h.Sum(nil))>>11) / (1 << 53)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func errorBody(code, message string) any {
	return map[string]any{"error": map[string]string{"code": code, "message": message}}
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, errorBody(code, message))
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(body); err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
