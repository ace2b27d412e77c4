package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/strata-es/strata/domain"
)

// DefaultPoolShare is PoolShareConfig.Share when unset: one tenant may
// hold at most half the serving pool's connections.
const DefaultPoolShare = 0.5

// DefaultPoolShareWait is how long a request waits for its tenant's share
// before 429.
const DefaultPoolShareWait = 2 * time.Second

// PoolShareConfig configures a PoolShare.
type PoolShareConfig struct {
	// PoolSize is the serving pool's MaxConns (STRATA_DB_MAX_CONNS).
	PoolSize int
	// Share is the fraction of PoolSize one tenant may hold, in (0, 1]
	// (STRATA_TENANT_POOL_SHARE); 1 switches the share off. The limit is
	// floor(Share*PoolSize), at least 1.
	Share float64
	// Wait bounds the wait for the tenant's share (DefaultPoolShareWait).
	Wait time.Duration
	// RejectFunc, if set, is called for every request refused (metrics).
	RejectFunc func(r *http.Request)
}

// PoolShare bounds how many requests of one tenant are past it at once,
// so that one tenant cannot hold the serving pool: each command or query
// holds at most one connection of the pool at a time, so a tenant with at
// most Limit requests past the share holds at most Limit connections, and
// PoolSize-Limit stay for the others. Unlike the TenantLimiter, whose
// limits are far above a pool's size (they protect the in-flight cap), a
// request beyond the share waits for it (up to Wait, then 429): the
// tenant's excess queues on its own semaphore instead of in the pool's
// queue in front of every other tenant. Mount it after the body is read,
// before the shared in-flight cap (a request waiting for its share then
// holds no shared slot).
type PoolShare struct {
	cfg   PoolShareConfig
	limit int
	mu    sync.Mutex
	sems  map[domain.TenantID]*shareSem
}

type shareSem struct {
	ch    chan struct{}
	users int // requests holding or waiting; the entry goes at zero
}

// NewPoolShare returns a PoolShare for cfg, or nil when the share is off
// (Share 1: Middleware is then a pass-through).
func NewPoolShare(cfg PoolShareConfig) (*PoolShare, error) {
	if cfg.Share == 0 {
		cfg.Share = DefaultPoolShare
	}
	if cfg.Wait == 0 {
		cfg.Wait = DefaultPoolShareWait
	}
	var errs []error
	if math.IsNaN(cfg.Share) || cfg.Share <= 0 || cfg.Share > 1 {
		errs = append(errs, fmt.Errorf("share %v: want a fraction in (0, 1]", cfg.Share))
	}
	if cfg.PoolSize < 1 {
		errs = append(errs, fmt.Errorf("pool size %d: want at least 1", cfg.PoolSize))
	}
	if cfg.Wait < 0 {
		errs = append(errs, errors.New("wait must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("tenant pool share: %w", err)
	}
	if cfg.Share == 1 {
		return nil, nil
	}
	limit := max(1, int(math.Floor(cfg.Share*float64(cfg.PoolSize))))
	return &PoolShare{cfg: cfg, limit: limit, sems: map[domain.TenantID]*shareSem{}}, nil
}

// Limit is how many requests (connections) one tenant may hold.
func (p *PoolShare) Limit() int {
	if p == nil {
		return 0
	}
	return p.limit
}

func (p *PoolShare) sem(t domain.TenantID, delta int) *shareSem {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.sems[t]
	if !ok {
		s = &shareSem{ch: make(chan struct{}, p.limit)}
		p.sems[t] = s
	}
	s.users += delta
	if s.users == 0 {
		delete(p.sems, t)
	}
	return s
}

// Middleware holds the request's tenant's share while next runs.
func (p *PoolShare) Middleware(next http.Handler) http.Handler {
	if p == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := domain.TenantFromContext(r.Context())
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		s := p.sem(tenant, 1)
		defer p.sem(tenant, -1)
		timer := time.NewTimer(p.cfg.Wait)
		defer timer.Stop()
		select {
		case s.ch <- struct{}{}:
		case <-timer.C:
			if p.cfg.RejectFunc != nil {
				p.cfg.RejectFunc(r)
			}
			WriteError(w, r, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, RetryAfter: time.Second,
				Message: fmt.Sprintf("tenant %s has %d requests using the database, its share of the pool: retry later", tenant, p.limit)})
			return
		case <-r.Context().Done():
			return
		}
		h := &shareHold{s: s, held: true}
		defer h.release()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), shareKey{}, h)))
	})
}

type shareKey struct{}

// shareHold is a request's hold on its tenant's share.
type shareHold struct {
	mu   sync.Mutex
	s    *shareSem
	held bool
}

func (h *shareHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		<-h.s.ch
		h.held = false
	}
}

// YieldPoolShare gives the request's share of the pool back while it
// blocks without a connection (a consistency wait), so that the tenant's
// waiting queries do not keep its other requests from the database. The
// returned resume takes it back, waiting as long as ctx allows (if ctx
// ends first the request goes on without it: it is about to answer). A
// request without a share gets a no-op.
func YieldPoolShare(ctx context.Context) (resume func()) {
	h, ok := ctx.Value(shareKey{}).(*shareHold)
	if !ok {
		return func() {}
	}
	h.release()
	return func() {
		select {
		case h.s.ch <- struct{}{}:
			h.mu.Lock()
			h.held = true
			h.mu.Unlock()
		case <-ctx.Done():
		}
	}
}
