package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/platformapi"
)

const tenantsUsage = `strata tenants — the tenant directory (docs/tenants.md); needs the owner connection (DATABASE_URL)

Usage:
  strata tenants list [--json]                                   every tenant, its status and provisioning
  strata tenants show T [--json]                                 one tenant: status, quotas, steps done
  strata tenants provision T [--name "..."] [--quota k=v ...] [--placement P] [--json]
                                                                 create T or finish its provisioning (idempotent)
  strata tenants suspend T --reason "..." [--json]               stop serving T (403 tenant_suspended); data kept
  strata tenants resume T --reason "..." [--json]                serve T again
  strata tenants quotas T k=v ... [--json]                       set T's quotas (k= removes one): ` + "rate_commands, rate_queries, in_flight_commands, in_flight_queries, in_flight_waits" + `
  strata tenants export T [--out FILE] [--json]                  write T's archive (events, read models, dead letters, idempotency records)
  strata tenants import FILE [--tenant T] [--wait 2m] [--json]   load an archive into an empty tenant
` + tenantsTiersUsage + tenantsEraseUsage + tenantsMoveUsage + tenantsArchiveUsage + `
Every call is recorded in tenant_audit as cli:<os user>.
`

func cmdTenants(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, tenantsUsage)
		return exitUsage
	}
	sub := args[0]
	if sub == "help" || sub == "-h" || sub == "--help" {
		fmt.Fprint(stdout, tenantsUsage)
		return exitOK
	}
	if sub == "export" || sub == "import" {
		return cmdTenantsPortability(ctx, sub, args[1:], e, stdout, stderr)
	}
	if code, ok := cmdTenantsTiers(ctx, sub, args[1:], e, stdout, stderr); ok {
		return code
	}
	if code, ok := cmdTenantsMove(ctx, sub, args[1:], e, stdout, stderr); ok {
		return code
	}
	if code, ok := cmdTenantsArchive(ctx, sub, args[1:], e, stdout, stderr); ok {
		return code
	}
	fs := flag.NewFlagSet("tenants "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	name := fs.String("name", "", "display name (provision)")
	placementName := fs.String("placement", "", "provision: the placement of a new tenant (`strata placements list`; default pool)")
	reason := fs.String("reason", "", "why (suspend, resume; recorded)")
	var ef eraseFlags
	fs.DurationVar(&ef.barrierTimeout, "barrier-timeout", time.Minute, "erase: how long to wait for every serving process to acknowledge")
	fs.DurationVar(&ef.quiesceTimeout, "quiesce-timeout", time.Minute, "erase: how long to wait for the runners to pass the tenant's last event")
	var quotas multiFlag
	fs.Var(&quotas, "quota", "k=v, repeatable (provision)")
	rest := args[1:]
	var id string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		id, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return exitUsage
	}
	positional := fs.Args()
	if id == "" && len(positional) > 0 {
		id, positional = positional[0], positional[1:]
	}
	needsID := sub != "list"
	var tenant domain.TenantID
	if needsID {
		t, err := domain.ParseTenantID(id)
		if err != nil {
			return usageError(stderr, fmt.Sprintf("tenants %s needs a tenant ID matching [a-z0-9-]{1,63}", sub))
		}
		tenant = t
	}
	switch sub {
	case "list", "show", "provision", "suspend", "resume", "quotas":
	case "erase", "status":
		if len(positional) > 0 {
			return usageError(stderr, fmt.Sprintf("unexpected arguments %q", positional))
		}
		return cmdTenantsErase(ctx, sub, tenant, *reason, ef, *asJSON, e, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "strata tenants: unknown subcommand %q\n\n%s", sub, tenantsUsage)
		return exitUsage
	}
	if (sub == "suspend" || sub == "resume") && strings.TrimSpace(*reason) == "" {
		return usageError(stderr, "tenants "+sub+" needs --reason: it is recorded with the change")
	}
	if sub == "quotas" {
		quotas = append(quotas, positional...)
		positional = nil
		if len(quotas) == 0 {
			return usageError(stderr, "tenants quotas needs k=v arguments")
		}
	}
	if len(positional) > 0 {
		return usageError(stderr, fmt.Sprintf("unexpected arguments %q", positional))
	}

	store, closeStore, err := openTenantStore(ctx, e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata tenants:", err)
		return exitFailure
	}
	defer closeStore()
	actor := tenancy.Actor{Subject: "cli:" + osUser()}

	var out tenancy.Tenant
	switch sub {
	case "list":
		ts, err := store.List(ctx, actor)
		if err != nil {
			return tenantsFailed(stderr, err)
		}
		if *asJSON {
			v := platformapi.ListView{Tenants: []platformapi.TenantView{}}
			for _, t := range ts {
				v.Tenants = append(v.Tenants, platformapi.View(t))
			}
			return printJSON(stdout, v)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tSTATUS\tNAME\tPLACEMENT\tPROVISIONED\tUPDATED")
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\n", t.ID, t.Status, t.Name, t.Placement, len(t.StepsDone()), len(tenancy.ProvisionSteps), t.UpdatedAt.UTC().Format(time.RFC3339))
		}
		tw.Flush()
		return exitOK
	case "show":
		out, err = store.Get(ctx, actor, tenant)
	case "provision":
		req := tenancy.ProvisionRequest{ID: tenant, Name: *name, Placement: *placementName}
		if len(quotas) > 0 {
			var q tenancy.Quotas
			if err := applyQuotaArgs(&q, quotas); err != nil {
				return usageError(stderr, err.Error())
			}
			req.Quotas = &q
		}
		out, err = store.Provision(ctx, actor, req)
	case "suspend":
		out, err = store.Suspend(ctx, actor, tenant, *reason)
	case "resume":
		out, err = store.Resume(ctx, actor, tenant, *reason)
	case "quotas":
		cur, gerr := store.Get(ctx, actor, tenant)
		if gerr != nil {
			return tenantsFailed(stderr, gerr)
		}
		q := cur.Quotas
		if err := applyQuotaArgs(&q, quotas); err != nil {
			return usageError(stderr, err.Error())
		}
		out, err = store.SetQuotas(ctx, actor, tenant, q)
	}
	if err != nil {
		return tenantsFailed(stderr, err)
	}
	if *asJSON {
		return printJSON(stdout, platformapi.View(out))
	}
	printTenant(stdout, out)
	return exitOK
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func applyQuotaArgs(q *tenancy.Quotas, args []string) error {
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("quota %q: want key=value (key= removes it)", a)
		}
		if err := q.Set(strings.TrimSpace(k), strings.TrimSpace(v)); err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), domain.ErrInvalid.Error()+": "))
		}
	}
	return nil
}

func printTenant(w io.Writer, t tenancy.Tenant) {
	v := platformapi.View(t)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tenant\t%s\n", v.ID)
	fmt.Fprintf(tw, "name\t%s\n", v.Name)
	status := v.Status
	if v.StatusReason != "" {
		status += " (" + v.StatusReason + ")"
	}
	fmt.Fprintf(tw, "status\t%s\n", status)
	fmt.Fprintf(tw, "placement\t%s\n", v.Placement)
	if v.Tier != "" || v.Cohort != "" {
		fmt.Fprintf(tw, "tier\t%s\ncohort\t%s\n", noneIfEmpty(v.Tier), noneIfEmpty(v.Cohort))
	}
	var steps []string
	for _, s := range tenancy.ProvisionSteps {
		if at, ok := v.Provisioning[s.Name]; ok {
			steps = append(steps, s.Name+" "+at.UTC().Format(time.RFC3339))
		} else {
			steps = append(steps, s.Name+" pending")
		}
	}
	fmt.Fprintf(tw, "provisioning\t%s\n", strings.Join(steps, "; "))
	raw, _ := json.Marshal(v.Quotas)
	var qm map[string]string
	_ = json.Unmarshal(raw, &qm)
	keys := make([]string, 0, len(qm))
	for k := range qm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var qs []string
	for _, k := range keys {
		qs = append(qs, k+"="+qm[k])
	}
	if len(qs) == 0 {
		qs = []string{"defaults"}
	}
	fmt.Fprintf(tw, "quotas\t%s\n", strings.Join(qs, " "))
	fmt.Fprintf(tw, "version\t%d\n", v.Version)
	fmt.Fprintf(tw, "created\t%s\n", v.CreatedAt.Format(time.RFC3339))
	fmt.Fprintf(tw, "updated\t%s\n", v.UpdatedAt.Format(time.RFC3339))
	tw.Flush()
}

func printJSON(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitFailure
	}
	return exitOK
}

func tenantsFailed(stderr io.Writer, err error) int {
	fmt.Fprintln(stderr, "strata tenants:", err) // an operator's tool: the database's text helps
	return exitFailure
}

func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

// openTenantStore connects to the owner connection (DATABASE_URL, or the
// embedded PostgreSQL of STRATA_DATA_DIR) and checks the schema.
func openTenantStore(ctx context.Context, e env, stderr io.Writer) (*tenancy.Store, func(), error) {
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	url, _, stopDB, err := e.database(ctx, logger)
	if errors.Is(err, errNoOwnerURL) {
		return nil, nil, errors.New("DATABASE_URL is not set: the tenant directory is written on the owner connection")
	}
	if err != nil {
		return nil, nil, err
	}
	pool, err := db.OpenPool(ctx, url, db.PoolConfig{Role: db.RoleProjector, MaxConns: 2, AppName: "strata-tenants"})
	if err != nil {
		stopDB()
		return nil, nil, err
	}
	closeAll := func() { pool.Close(); stopDB() }
	if err := db.Check(ctx, pool); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("%v: run `strata migrate up`", err)
	}
	store, err := newTenantStore(e, pool)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return store, closeAll, nil
}
