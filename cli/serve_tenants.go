package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/telemetry"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/platformapi"
)

// tenantWiring is what serve's command and query roles take from the
// tenant directory: the gate in front of their routes and the per-tenant
// quotas for the limiters.
type tenantWiring struct {
	dir     *tenancy.Directory // nil for a projector-only process
	gate    mux.MiddlewareFunc
	metrics *telemetry.TenantMetrics // nil without dir (serve_tenant_ops.go)
}

func (t tenantWiring) rates(id domain.TenantID) httpapi.TenantRates {
	if t.dir == nil {
		return httpapi.TenantRates{}
	}
	return t.dir.Rates(id)
}

func (t tenantWiring) slots(id domain.TenantID) httpapi.TenantSlots {
	if t.dir == nil {
		return httpapi.TenantSlots{}
	}
	return t.dir.Slots(id)
}

// wireTenancy gives a serving process its copy of the tenant directory
// (docs/tenants.md): loaded once now, then kept current by the push and
// the periodic reload (STRATA_TENANT_DIRECTORY_RELOAD); the gate that
// refuses suspended and, when the directory is required
// (STRATA_REQUIRE_TENANT_DIRECTORY, else the installation's setting),
// unknown tenants; the platform routes on the query role; and, for the
// development flow whose banner prints a token of the demo tenant, that
// tenant provisioned.
//
// A process with only the projector role has no directory: projections,
// the relay and dead letters go on for every tenant, suspended or not.
func wireTenancy(ctx context.Context, a *app, roles roleSet, devSecret bool) (tenantWiring, error) {
	if !roles[roleCommand] && !roles[roleQuery] {
		return tenantWiring{gate: func(h http.Handler) http.Handler { return h }}, nil
	}
	reload, err := a.env.duration("STRATA_TENANT_DIRECTORY_RELOAD", tenancy.DefaultReload)
	if err != nil {
		return tenantWiring{}, err
	}
	lease, err := a.env.duration("STRATA_TENANT_DIRECTORY_LEASE", tenancy.DefaultLease)
	if err != nil {
		return tenantWiring{}, err
	}
	var roleNames []string
	for _, r := range []string{roleCommand, roleQuery} {
		if roles[r] {
			roleNames = append(roleNames, r)
		}
	}
	cfg := tenancy.DirectoryConfig{Pool: a.appPool, Reload: reload, Logger: a.logger,
		Lease: lease, Member: tenancy.MemberInfo{Role: strings.Join(roleNames, ",")}}
	if v := a.env.str("STRATA_REQUIRE_TENANT_DIRECTORY", ""); v != "" {
		req, err := a.env.boolean("STRATA_REQUIRE_TENANT_DIRECTORY", false)
		if err != nil {
			return tenantWiring{}, err
		}
		cfg.Require = &req
	}
	dir := tenancy.NewDirectory(cfg)
	// Loaded, and a member of the erasure's barrier, before serving anyone.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	loadErr := dir.Join(lctx)
	cancel()
	if loadErr != nil {
		// serve starts while its database comes up: the gate answers 503
		// until the listener's first load.
		a.logger.Warn("cannot load the tenant directory yet; commands and queries answer 503 until it loads", "error", loadErr.Error())
	}
	a.workers = append(a.workers, worker{name: "tenant directory", run: dir.Run})
	a.readiness = append(a.readiness, readinessCheck{"tenant_directory", func(context.Context) error {
		if !dir.Loaded() {
			return fmt.Errorf("not loaded yet")
		}
		if dir.Fenced() {
			return fmt.Errorf("no heartbeat within the lease (STRATA_TENANT_DIRECTORY_LEASE): every tenant refused")
		}
		return nil
	}})

	var store *tenancy.Store
	if a.pools.owner != nil {
		if store, err = newTenantStore(a.env, a.pools.owner); err != nil {
			return tenantWiring{}, err
		}
	}
	tm, hitters, err := wireTenantMetrics(a, dir)
	if err != nil {
		return tenantWiring{}, err
	}
	if roles[roleQuery] {
		jobs, err := exportJobs(ctx, a, store)
		if err != nil {
			return tenantWiring{}, err
		}
		if err := wirePlatformRetention(a, store, jobs); err != nil {
			return tenantWiring{}, err
		}
		api := platformapi.New(store).WithExports(jobs).WithHeavyHitters(hitters)
		if store != nil {
			er, closeEr, err := newEraser(a.env, a.pools.owner, store, a.logger, eraseFlags{}, nil)
			if err != nil {
				return tenantWiring{}, err
			}
			api.SetEraser(ctx, er, a.logger)
			go func() { <-ctx.Done(); closeEr() }()
			ar, err := serveArchiver(ctx, a, store)
			if err != nil {
				return tenantWiring{}, err
			}
			if ar != nil {
				api.SetArchiver(ctx, ar, a.logger)
			}
		}
		api.Register(a.api)
	}
	if devSecret && loadErr == nil {
		if err := provisionDevTenant(ctx, a, dir, store); err != nil {
			return tenantWiring{}, err
		}
	}
	a.logger.Info("tenant directory", "required", dir.Required(), "loaded", dir.Loaded(), "reload", reload.String())
	return tenantWiring{dir: dir, gate: tenancy.Gate(dir, tenancy.GateConfig{}), metrics: tm}, nil
}

// newTenantStore is the platform path on an owner pool; provisioning moves
// a tenant's values of STRATA_RATE_OVERRIDES and
// STRATA_TENANT_IN_FLIGHT_OVERRIDES into its directory quotas.
func newTenantStore(e env, pool *pgxpool.Pool) (*tenancy.Store, error) {
	rates, err := httpapi.ParseRateOverrides(e.str("STRATA_RATE_OVERRIDES", ""))
	if err != nil {
		return nil, fmt.Errorf("STRATA_RATE_OVERRIDES: %w", err)
	}
	slots, err := httpapi.ParseSlotOverrides(e.str("STRATA_TENANT_IN_FLIGHT_OVERRIDES", ""))
	if err != nil {
		return nil, fmt.Errorf("STRATA_TENANT_IN_FLIGHT_OVERRIDES: %w", err)
	}
	return tenancy.NewStore(tenancy.StoreConfig{Pool: pool, DefaultQuotasFunc: func(id domain.TenantID) tenancy.Quotas {
		return tenancy.QuotasFromOverrides(id, rates, slots)
	}})
}

// provisionDevTenant provisions the tenant of the banner's development
// token, so that `make run` and the README's walkthrough work on a fresh
// installation, where the directory is required. It is a platform call
// like any other (audited as serve:development); a process without the
// owner connection leaves it to one that has it.
func provisionDevTenant(ctx context.Context, a *app, dir *tenancy.Directory, store *tenancy.Store) error {
	if e, ok := dir.Lookup(devTenant); ok && e.Status != tenancy.StatusProvisioning {
		return nil // active, or suspended by an operator: theirs to decide
	}
	if store == nil {
		if a.url == "" {
			return nil
		}
		pool, err := db.OpenPool(ctx, a.url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 1, AppName: "strata-owner"})
		if err != nil {
			return err
		}
		defer pool.Close()
		if store, err = newTenantStore(a.env, pool); err != nil {
			return err
		}
	}
	t, err := store.Provision(ctx, tenancy.Actor{Subject: "serve:development"}, tenancy.ProvisionRequest{ID: devTenant, Name: "Demo (development)"})
	if err != nil {
		return fmt.Errorf("provision the development tenant %s: %w", devTenant, err)
	}
	if _, err := dir.Check(ctx, t.ID); err != nil { // served from the first request, not from the push
		return err
	}
	a.logger.Info("provisioned the development tenant", "tenant", devTenant)
	return nil
}
