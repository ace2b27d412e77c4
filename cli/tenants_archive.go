package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/internal/pgsession"
	"github.com/strata-es/strata/placement"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/archive"
	"github.com/strata-es/strata/tenancy/archive/s3store"
	"github.com/strata-es/strata/tenancy/portability"
)

const tenantsArchiveUsage = `  strata tenants archive T --reason "..." [--json]              write T to the archive store, verify it, purge it here (resumable: run it again)
  strata tenants rehydrate T [--wait 2m] [--json]               bring an archived T back: check the object, import it, serve T again
  strata tenants archive-status T [--json]                      T's archive: steps, object, receipt, re-hydration
`

// archiveStore opens the archive store the environment names (nil, nil
// when none is configured): STRATA_ARCHIVE_S3_ENDPOINT (http:// or
// https://), _BUCKET, _REGION, _ACCESS_KEY, _SECRET_KEY, and
// _CREATE_BUCKET=true to make the bucket on first use.
func archiveStore(ctx context.Context, e env) (archive.ObjectStore, error) {
	endpoint := e.str("STRATA_ARCHIVE_S3_ENDPOINT", "")
	if endpoint == "" {
		return nil, nil
	}
	create, err := e.boolean("STRATA_ARCHIVE_S3_CREATE_BUCKET", false)
	if err != nil {
		return nil, err
	}
	s, err := s3store.New(ctx, s3store.Config{Endpoint: endpoint, Bucket: e.str("STRATA_ARCHIVE_S3_BUCKET", ""), Region: e.str("STRATA_ARCHIVE_S3_REGION", ""),
		AccessKey: e.str("STRATA_ARCHIVE_S3_ACCESS_KEY", ""), SecretKey: e.str("STRATA_ARCHIVE_S3_SECRET_KEY", ""), CreateBucket: create})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// cmdTenantsArchive runs `tenants archive`, `rehydrate` and
// `archive-status`; ok false for another subcommand.
func cmdTenantsArchive(ctx context.Context, sub string, args []string, e env, stdout, stderr io.Writer) (int, bool) {
	if sub != "archive" && sub != "rehydrate" && sub != "archive-status" {
		return 0, false
	}
	fs := flag.NewFlagSet("tenants "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	reason := fs.String("reason", "", "archive: why (recorded, and in the receipt)")
	wait := fs.Duration("wait", 2*time.Minute, "rehydrate: how long to wait for the projections before comparing the read models")
	var ef eraseFlags
	fs.DurationVar(&ef.barrierTimeout, "barrier-timeout", time.Minute, "archive: how long to wait for every serving process to acknowledge")
	fs.DurationVar(&ef.quiesceTimeout, "quiesce-timeout", time.Minute, "archive: how long to wait for the runners to pass the tenant's last event")
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage, true
	}
	if fs.NArg() > 0 {
		return usageError(stderr, fmt.Sprintf("unexpected arguments %q", fs.Args())), true
	}
	tenant, err := domain.ParseTenantID(id)
	if err != nil {
		return usageError(stderr, fmt.Sprintf("tenants %s needs a tenant ID matching [a-z0-9-]{1,63}", sub)), true
	}
	if sub == "archive" && strings.TrimSpace(*reason) == "" {
		return usageError(stderr, "tenants archive needs --reason: it is recorded with the archive and in its receipt"), true
	}
	a, closeAll, err := openArchiver(ctx, e, stderr, *wait, ef)
	if err != nil {
		fmt.Fprintln(stderr, "strata tenants:", err)
		return exitFailure, true
	}
	defer closeAll()
	who := tenancy.Actor{Subject: "cli:" + osUser()}
	var r archive.Record
	switch sub {
	case "archive":
		r, err = a.Archive(ctx, who, tenant, *reason)
	case "rehydrate":
		r, err = a.Rehydrate(ctx, who, tenant)
	default:
		r, err = a.Status(ctx, tenant)
	}
	if err != nil {
		if r.ArchiveID != "" {
			printArchive(stderr, r)
		}
		return tenantsFailed(stderr, err), true
	}
	if *asJSON {
		return printJSON(stdout, r), true
	}
	printArchive(stdout, r)
	return exitOK, true
}

// archiveAfter is the archive's AfterFunc: nil but in tests, which stop
// the workflows after each step to run them again.
var archiveAfter func(ctx context.Context, tenant domain.TenantID, point string) error

// openArchiver opens what an archive needs: the export and import
// service and its pools, a fence, the archive store.
func openArchiver(ctx context.Context, e env, stderr io.Writer, catchUp time.Duration, ef eraseFlags) (*archive.Archiver, func(), error) {
	objects, err := archiveStore(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	if objects == nil {
		return nil, nil, fmt.Errorf("no archive store: set STRATA_ARCHIVE_S3_ENDPOINT and STRATA_ARCHIVE_S3_BUCKET (docs/tenants.md, \"Archive\")")
	}
	p, closeAll, err := openPortabilityParts(ctx, e, stderr, catchUp)
	if err != nil {
		return nil, nil, err
	}
	fence, err := archiveFence(e, p.owner, p.store, ef)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	a, err := archive.New(archive.Config{Pool: p.owner, Side: placement.Side{Name: placement.Pool, App: p.app, Proj: p.proj, Owner: p.owner},
		Directory: p.store, Fence: fence, Portability: p.svc, Objects: objects, CatchUp: catchUp, AfterFunc: archiveAfter,
		Progress: func(pr archive.Progress) { fmt.Fprintf(stderr, "%s: %s: %s\n", pr.Tenant, pr.Step, pr.Message) }})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return a, closeAll, nil
}

// serveArchiver is the platform API's archiver in serve: nil when no
// archive store is configured (the routes answer 503), without the owner
// connection, or with an EventStoreDB log (the export does not read it).
func serveArchiver(ctx context.Context, a *app, store *tenancy.Store) (*archive.Archiver, error) {
	objects, err := archiveStore(ctx, a.env)
	if err != nil {
		return nil, fmt.Errorf("the archive store: %w", err)
	}
	if objects == nil || store == nil || a.pools.owner == nil || a.projPool == nil || a.external {
		return nil, nil
	}
	owner := a.pools.owner
	fence, err := archiveFence(a.env, owner, store, eraseFlags{})
	if err != nil {
		return nil, err
	}
	cfg := portabilityConfig(a.env.mods)
	cfg.App, cfg.Projector, cfg.Owner, cfg.Actor = a.appPool, a.projPool, a.pools.owner, "serve"
	cfg.Registry = a.registry
	svc, err := portability.New(cfg)
	if err != nil {
		return nil, err
	}
	return archive.New(archive.Config{Pool: owner, Side: placement.Side{Name: placement.Pool, App: a.appPool, Proj: a.projPool, Owner: owner},
		Directory: store, Fence: fence, Portability: svc, Objects: objects,
		Progress: func(p archive.Progress) {
			a.logger.Info("archive", "tenant", string(p.Tenant), "step", p.Step, "message", p.Message)
		}})
}

// archiveFence is the archive's fence: the erasure's barrier and
// quiescence, on the serving processes' lease and every runner family.
func archiveFence(e env, owner *pgxpool.Pool, store *tenancy.Store, ef eraseFlags) (*tenancy.Fence, error) {
	lease, err := e.duration("STRATA_TENANT_DIRECTORY_LEASE", tenancy.DefaultLease)
	if err != nil {
		return nil, err
	}
	return tenancy.NewFence(tenancy.FenceConfig{Pool: owner, Store: store, Lease: lease,
		BarrierTimeout: ef.barrierTimeout, QuiesceTimeout: ef.quiesceTimeout, ExportStaleAfter: portability.StaleAfter,
		RunnerLiveFunc: func(ctx context.Context, name string) (bool, error) {
			return pgsession.CheckpointLive(ctx, owner, name)
		}}), nil
}

// printArchive prints a tenant's archive record.
func printArchive(w io.Writer, r archive.Record) {
	fmt.Fprintf(w, "tenant %s: %s (archive %s, was %s)\n", r.Tenant, r.Phase, r.ArchiveID, r.PriorStatus)
	fmt.Fprintf(w, "  requested by %s: %s\n", r.RequestedBy, terminalSafe(r.Reason))
	for _, s := range archive.ArchiveSteps {
		at, ok := r.Steps[s]
		fmt.Fprintf(w, "  %-8s %s\n", s, stepAt(at, ok))
	}
	if r.ObjectKey != "" {
		fmt.Fprintf(w, "  object   %s in %s, %d bytes, sha256 %s\n", r.ObjectKey, r.Store, r.Bytes, r.SHA256)
	}
	if rc := r.Receipt; rc != nil && rc.ContentHash != "" {
		tables := make([]string, 0, len(rc.Purged.Deleted))
		for t, n := range rc.Purged.Deleted {
			if n > 0 {
				tables = append(tables, fmt.Sprintf("%s %d", t, n))
			}
		}
		sort.Strings(tables)
		fmt.Fprintf(w, "  purged   %s\n", strings.Join(tables, ", "))
		fmt.Fprintf(w, "  receipt  content hash %s\n", rc.ContentHash)
	}
	if h := r.Rehydration; h != nil {
		fmt.Fprintf(w, "  re-hydration requested by %s:\n", h.RequestedBy)
		for _, s := range archive.RehydrationSteps {
			at, ok := h.Steps[s]
			fmt.Fprintf(w, "  %-8s %s\n", s, stepAt(at, ok))
		}
		if h.Import != nil {
			tables := make([]string, 0, len(h.Import.ReadModels))
			for t, v := range h.Import.ReadModels {
				tables = append(tables, t+" "+v)
			}
			sort.Strings(tables)
			fmt.Fprintf(w, "  imported %d events; read models: %s\n", h.Import.Events, strings.Join(tables, ", "))
		}
	}
	if r.LastError != "" {
		fmt.Fprintf(w, "  last error: %s\n", terminalSafe(r.LastError))
	}
}

func stepAt(at time.Time, ok bool) string {
	if !ok {
		return "-"
	}
	return at.Format(time.RFC3339)
}
