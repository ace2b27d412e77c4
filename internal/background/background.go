// Package background runs a serving process's long workflows (a tenant's
// erasure or archive, a data subject's erasure) in the background, one per
// key at a time, on the process's context: a shutdown stops one between
// its steps, and asking again (over HTTP or from the CLI) resumes it.
package background

import (
	"context"
	"log/slog"
	"sync"
)

// Runner runs workflows by key.
type Runner struct {
	ctx     context.Context
	logger  *slog.Logger
	mu      sync.Mutex
	running map[string]bool
}

// New returns a Runner whose workflows run on ctx.
func New(ctx context.Context, logger *slog.Logger) *Runner {
	if logger == nil {
		logger = slog.Default()
	}
	return &Runner{ctx: ctx, logger: logger, running: map[string]bool{}}
}

// Start runs fn unless a workflow of key runs here already; an error is
// logged as a warning naming what, with the attrs.
func (b *Runner) Start(key, what string, fn func(context.Context) error, attrs ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[key] {
		return
	}
	b.running[key] = true
	go func() {
		defer func() { b.mu.Lock(); delete(b.running, key); b.mu.Unlock() }()
		if err := fn(b.ctx); err != nil {
			b.logger.Warn(what+" stopped; ask again to resume", append(attrs, "error", err.Error())...)
		}
	}()
}
