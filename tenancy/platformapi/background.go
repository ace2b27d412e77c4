package platformapi

import (
	"context"
	"log/slog"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/background"
)

// tenantJobs runs a tenant's long workflows (an erasure, an archive) in
// the background of a serving process, one per tenant at a time
// (internal/background): POST again, here or from the CLI, resumes one.
type tenantJobs struct{ runner *background.Runner }

func newBackground(ctx context.Context, logger *slog.Logger) tenantJobs {
	return tenantJobs{runner: background.New(ctx, logger)}
}

// start runs fn for the tenant unless a workflow of it runs here already;
// what names it in the warning its error gives.
func (b tenantJobs) start(id domain.TenantID, what string, fn func(context.Context) error) {
	b.runner.Start(string(id), "tenant "+what, fn, "tenant", string(id))
}
