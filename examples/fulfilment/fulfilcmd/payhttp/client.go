package payhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain"
)

// ErrUnavailable wraps every retryable failure: a 5xx, a timeout, a
// connection refused or closed without an answer. The effect may or may
// not have happened; calling again with the same key is safe.
var ErrUnavailable = errors.New("payment provider unavailable")

// DefaultTimeout bounds one call when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Config configures a Client.
type Config struct {
	// URL is the provider's base URL (scheme and host, optionally a path
	// prefix): STRATA_PAYMENT_URL.
	URL string
	// Timeout bounds each call (default DefaultTimeout).
	Timeout time.Duration
	// HTTPClient is the transport (default: a client of its own).
	HTTPClient *http.Client
}

func (c *Config) setDefaults() {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
}

// Validate reports a configuration New refuses.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("payment provider URL %q: want http(s)://host[:port][/prefix]", redact(c.URL))
	}
	if u.User != nil {
		return errors.New("payment provider URL: credentials in the URL are not supported")
	}
	return nil
}

// Client calls one provider.
type Client struct {
	base string
	cfg  Config
}

var _ process.Port = (*Client)(nil)

// New returns a client of the provider at cfg.URL.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{base: strings.TrimRight(cfg.URL, "/"), cfg: cfg}, nil
}

// Capture is what the provider answers a capture.
type Capture struct {
	CaptureID string `json:"capture_id"`
	Status    string `json:"status"`
}

// VoidResult is what the provider answers a void.
type VoidResult struct {
	Key       string `json:"key"`
	Status    string `json:"status"`
	CaptureID string `json:"capture_id,omitempty"`
}

// Capture takes amount (minor units) of currency for orderID under key.
// Errors: *process.Rejected (declined, or the key was voided),
// ErrUnavailable (retry with the same key), anything else (a bad request:
// a bug, not retried usefully).
func (c *Client) Capture(ctx context.Context, key, orderID string, amount int64, currency string) (Capture, error) {
	body, _ := json.Marshal(map[string]any{"order_id": orderID, "amount": amount, "currency": currency})
	var out Capture
	if err := c.call(ctx, "/v1/captures", key, body, http.StatusCreated, &out); err != nil {
		return Capture{}, err
	}
	if out.CaptureID == "" {
		return Capture{}, fmt.Errorf("%w: capture answered without a capture_id", ErrUnavailable)
	}
	return out, nil
}

// Void voids the capture under captureKey: one not made yet is refused from
// now on, one made is reversed. Voiding again answers the same. Errors as
// for Capture.
func (c *Client) Void(ctx context.Context, captureKey string) (VoidResult, error) {
	var out VoidResult
	err := c.call(ctx, "/v1/captures/"+url.PathEscape(captureKey)+"/void", "", []byte("{}"), http.StatusOK, &out)
	return out, err
}

func (c *Client) call(ctx context.Context, path, key string, body []byte, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("payment provider request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		// Refused, reset, closed without an answer, timed out: the effect
		// is unknown, the key makes a retry safe. The URL error text names
		// the host only (credentials are refused by Validate).
		return fmt.Errorf("%w: %s", ErrUnavailable, transportReason(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fmt.Errorf("%w: reading the answer: %s", ErrUnavailable, transportReason(err))
	}
	switch {
	case resp.StatusCode == want:
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%w: answer %d is not JSON", ErrUnavailable, resp.StatusCode)
		}
		return nil
	case resp.StatusCode == http.StatusPaymentRequired, resp.StatusCode == http.StatusConflict:
		return &process.Rejected{Reason: "payment " + errorCode(data, resp.StatusCode)}
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusRequestTimeout:
		return fmt.Errorf("%w: status %d", ErrUnavailable, resp.StatusCode)
	default:
		return fmt.Errorf("payment provider answered %d (%s)", resp.StatusCode, errorCode(data, resp.StatusCode))
	}
}

// transportReason says why a call failed without leaking the URL's query.
func transportReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

func errorCode(data []byte, status int) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
		return e.Error.Code
	}
	return http.StatusText(status)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparsable)"
		}
		return raw
	}
	u.User = url.User("redacted")
	return u.String()
}

// Request is an intent's payload on the payment port: a capture of Amount
// for OrderID, or a void of the capture under CaptureKey.
type Request struct {
	Op       string `json:"op"` // OpCapture or OpVoid
	OrderID  string `json:"order_id"`
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// CaptureKey (void) is the capture step's idempotency key, as the
	// runtime passed it to the capture (before the tenant prefix).
	CaptureKey string `json:"capture_key,omitempty"`
}

// Operations of a Request.
const (
	OpCapture = "capture"
	OpVoid    = "void"
)

// ProviderKey is the Idempotency-Key the provider sees for the step key of
// tenant: the tenant is part of it, since the provider is shared and order
// IDs are only unique within a tenant.
func ProviderKey(tenant domain.TenantID, key string) string { return string(tenant) + "/" + key }

// Execute implements process.Port: payload is a Request; key is the step's
// idempotency key. A capture answers its Capture (capture_id is the
// order's payment reference), a void its VoidResult.
func (c *Client) Execute(ctx context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("decode payment intent: %w", err)
	}
	var out any
	var err error
	switch req.Op {
	case OpCapture:
		out, err = c.Capture(ctx, ProviderKey(tenant, key), req.OrderID, req.Amount, req.Currency)
	case OpVoid:
		if req.CaptureKey == "" {
			return nil, errors.New("payment void without a capture_key")
		}
		out, err = c.Void(ctx, ProviderKey(tenant, req.CaptureKey))
	default:
		return nil, fmt.Errorf("payment intent op %q: want capture or void", req.Op)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}
