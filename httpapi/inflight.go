package httpapi

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// DefaultMaxInFlight is InFlightConfig.Max when unset.
const DefaultMaxInFlight = 256

// InFlightConfig configures an InFlightCap.
type InFlightConfig struct {
	// Max is how many requests may be in flight at once (default
	// DefaultMaxInFlight).
	Max int
	// ExemptFunc picks requests that are neither counted nor shed
	// (default IsProbe: the health checks must answer under load).
	ExemptFunc func(r *http.Request) bool
	// ShedFunc, if set, is called for every shed request (metrics).
	ShedFunc func(r *http.Request)
}

func (c *InFlightConfig) setDefaults() {
	if c.Max == 0 {
		c.Max = DefaultMaxInFlight
	}
	if c.ExemptFunc == nil {
		c.ExemptFunc = IsProbe
	}
}

// Validate reports every invalid setting.
func (c InFlightConfig) Validate() error {
	if c.Max < 0 {
		return fmt.Errorf("max in-flight requests must not be negative (got %d)", c.Max)
	}
	return nil
}

// IsProbe reports whether r is a liveness or readiness probe (/livez,
// /readyz).
func IsProbe(r *http.Request) bool {
	return r.URL.Path == "/livez" || r.URL.Path == "/readyz"
}

// InFlightCap sheds load: beyond Max requests in flight it answers 503
// unavailable with Retry-After: 1 at once, rather than queueing without
// bound (which only turns overload into timeouts for everyone).
type InFlightCap struct {
	cfg InFlightConfig
	n   atomic.Int64
}

// NewInFlightCap returns a cap for cfg.
func NewInFlightCap(cfg InFlightConfig) (*InFlightCap, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &InFlightCap{cfg: cfg}, nil
}

// InFlight returns how many counted requests are in flight now.
func (c *InFlightCap) InFlight() int { return int(c.n.Load()) }

// Middleware applies the cap to next.
func (c *InFlightCap) Middleware(next http.Handler) http.Handler {
	limit := int64(c.cfg.Max)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.ExemptFunc(r) {
			next.ServeHTTP(w, r)
			return
		}
		if c.n.Add(1) > limit {
			c.n.Add(-1)
			if c.cfg.ShedFunc != nil {
				c.cfg.ShedFunc(r)
			}
			WriteError(w, r, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
				Message: "the server is at capacity: retry later", RetryAfter: time.Second})
			return
		}
		defer c.n.Add(-1)
		next.ServeHTTP(w, r)
	})
}
