package platformapi

import (
	"context"
	"log/slog"
	"sync"

	"github.com/strata-es/strata/domain"
)

// background runs a tenant's long workflows (an erasure, an archive) in
// the background of a serving process: one per tenant at a time, on the
// process's context (a shutdown stops it between steps; POST again, here
// or from the CLI, resumes it).
type background struct {
	ctx     context.Context
	logger  *slog.Logger
	mu      sync.Mutex
	running map[domain.TenantID]bool
}

func newBackground(ctx context.Context, logger *slog.Logger) background {
	if logger == nil {
		logger = slog.Default()
	}
	return background{ctx: ctx, logger: logger, running: map[domain.TenantID]bool{}}
}

// start runs fn for the tenant unless a workflow of it runs here already;
// what names it in the warning its error gives.
func (b *background) start(id domain.TenantID, what string, fn func(context.Context) error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running[id] {
		return
	}
	b.running[id] = true
	go func() {
		defer func() { b.mu.Lock(); delete(b.running, id); b.mu.Unlock() }()
		if err := fn(b.ctx); err != nil {
			b.logger.Warn("tenant "+what+" stopped; POST again to resume", "tenant", string(id), "error", err.Error())
		}
	}()
}
