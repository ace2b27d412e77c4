package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/platformapi"
)

const tenantsTiersUsage = `  strata tenants tier T NAME [--json]                            put T in tier NAME ("" or none: no tier)
  strata tenants tiers [--json]                                  every tier and its quotas
  strata tenants tiers set NAME [k=v ...] [--description "..."] [--json]
                                                                 create a tier or set its quotas (k= removes one)
  strata tenants cohort T NAME [--json]                          label T's metrics with its tenant_id in cohort NAME ("" or none: out)
  strata tenants retention T [k=v ...] [--json]                  show T's retention windows, or set them (k= takes the default again):
                                                                 idempotency_records, resolved_dead_letters, audit (30d, 36h or keep)
`

// cmdTenantsTiers runs the subcommands of tiers, cohorts and retention;
// ok is false for any other subcommand.
func cmdTenantsTiers(ctx context.Context, sub string, args []string, e env, stdout, stderr io.Writer) (code int, ok bool) {
	switch sub {
	case "tier", "tiers", "cohort", "retention":
	default:
		return 0, false
	}
	fs := flag.NewFlagSet("tenants "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	description := fs.String("description", "", "the tier's description (tiers set)")
	// Flags may come anywhere: take the positional arguments out first.
	var pos, flags []string
	for i := 0; i < len(args); i++ {
		if strings.HasPrefix(args[i], "-") {
			flags = append(flags, args[i])
			if args[i] == "--description" || args[i] == "-description" {
				if i+1 < len(args) {
					flags = append(flags, args[i+1])
					i++
				}
			}
			continue
		}
		pos = append(pos, args[i])
	}
	if err := fs.Parse(flags); err != nil {
		return exitUsage, true
	}
	if len(fs.Args()) > 0 {
		return usageError(stderr, fmt.Sprintf("unexpected arguments %q", fs.Args())), true
	}
	needTenant := sub != "tiers"
	var tenant domain.TenantID
	if needTenant {
		if len(pos) == 0 {
			return usageError(stderr, "tenants "+sub+" needs a tenant ID matching [a-z0-9-]{1,63}"), true
		}
		t, err := domain.ParseTenantID(pos[0])
		if err != nil {
			return usageError(stderr, "tenants "+sub+" needs a tenant ID matching [a-z0-9-]{1,63}"), true
		}
		tenant, pos = t, pos[1:]
	}
	var setName string
	switch sub {
	case "tier", "cohort":
		if len(pos) != 1 {
			return usageError(stderr, "tenants "+sub+" needs T and a name (none: take it out)"), true
		}
		if setName = pos[0]; setName == "none" {
			setName = ""
		}
	case "tiers":
		if len(pos) > 0 && pos[0] != "set" {
			return usageError(stderr, fmt.Sprintf("unexpected arguments %q", pos)), true
		}
		if len(pos) == 1 {
			return usageError(stderr, "tenants tiers set needs a tier name (and k=v quotas; k= removes one)"), true
		}
	}
	var retention map[string]string
	if sub == "retention" && len(pos) > 0 {
		retention = map[string]string{}
		for _, a := range pos {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				return usageError(stderr, fmt.Sprintf("retention %q: want key=window (key= takes the default again)", a)), true
			}
			retention[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	defaults, err := retentionDefaults(e)
	if err != nil {
		return usageError(stderr, err.Error()), true
	}

	store, closeStore, err := openTenantStore(ctx, e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata tenants:", err)
		return exitFailure, true
	}
	defer closeStore()
	actor := tenancy.Actor{Subject: "cli:" + osUser()}

	switch sub {
	case "tier", "cohort":
		set := store.SetTier
		if sub == "cohort" {
			set = store.SetCohort
		}
		t, err := set(ctx, actor, tenant, setName)
		if err != nil {
			return tenantsFailed(stderr, err), true
		}
		if *asJSON {
			return printJSON(stdout, platformapi.View(t)), true
		}
		printTenant(stdout, t)
		return exitOK, true
	case "tiers":
		if len(pos) > 0 {
			ts, err := store.Tiers(ctx, actor)
			if err != nil {
				return tenantsFailed(stderr, err), true
			}
			var q tenancy.Quotas // a new tier starts with none
			for _, t := range ts {
				if t.Name == pos[1] {
					q = t.Quotas
				}
			}
			if err := applyQuotaArgs(&q, pos[2:]); err != nil {
				return usageError(stderr, err.Error()), true
			}
			t, err := store.SetTierQuotas(ctx, actor, pos[1], q, *description)
			if err != nil {
				return tenantsFailed(stderr, err), true
			}
			if *asJSON {
				return printJSON(stdout, platformapi.ViewTier(t)), true
			}
			printTiers(stdout, []tenancy.Tier{t})
			return exitOK, true
		}
		ts, err := store.Tiers(ctx, actor)
		if err != nil {
			return tenantsFailed(stderr, err), true
		}
		if *asJSON {
			v := platformapi.TierListView{Tiers: []platformapi.TierView{}}
			for _, t := range ts {
				v.Tiers = append(v.Tiers, platformapi.ViewTier(t))
			}
			return printJSON(stdout, v), true
		}
		printTiers(stdout, ts)
		return exitOK, true
	}

	// retention
	var t tenancy.Tenant
	if retention != nil {
		cur, err := store.Get(ctx, actor, tenant)
		if err != nil {
			return tenantsFailed(stderr, err), true
		}
		merged := map[string]string{}
		for k, v := range cur.Retention {
			if s, ok := v.(string); ok {
				merged[k] = s
			}
		}
		for k, v := range retention {
			if v == "" {
				delete(merged, k)
			} else {
				merged[k] = v
			}
		}
		t, err = store.SetRetention(ctx, actor, tenant, merged)
		if err != nil {
			return tenantsFailed(stderr, err), true
		}
	} else if t, err = store.Get(ctx, actor, tenant); err != nil {
		return tenantsFailed(stderr, err), true
	}
	v := retentionView(t, defaults)
	if *asJSON {
		return printJSON(stdout, v), true
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "tenant %s\n", t.ID)
	fmt.Fprintln(tw, "KIND\tWINDOW\tSOURCE")
	for _, k := range tenancy.RetentionKeys {
		w := v.Windows[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k, w.Window, w.Source)
	}
	tw.Flush()
	return exitOK, true
}

// RetentionWindowView is one kind's window and where it comes from.
type RetentionWindowView struct {
	Window string `json:"window"`
	Source string `json:"source"` // tenant or default
}

// RetentionView is `strata tenants retention T --json`.
type RetentionView struct {
	Tenant  string                         `json:"tenant"`
	Windows map[string]RetentionWindowView `json:"windows"`
}

func retentionView(t tenancy.Tenant, defaults tenancy.Windows) RetentionView {
	own := tenancy.RetentionOf(t.Retention)
	v := RetentionView{Tenant: string(t.ID), Windows: map[string]RetentionWindowView{}}
	for _, k := range tenancy.RetentionKeys {
		if w, ok := own[k]; ok {
			v.Windows[k] = RetentionWindowView{w.String(), "tenant"}
		} else {
			v.Windows[k] = RetentionWindowView{defaults[k].String(), "default"}
		}
	}
	return v
}

func printTiers(w io.Writer, ts []tenancy.Tier) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tQUOTAS\tDESCRIPTION")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, quotaString(t.Quotas), t.Description)
	}
	tw.Flush()
}

func quotaString(q tenancy.Quotas) string {
	var out []string
	for _, kv := range [][2]string{{"rate_commands", q.RateCommands}, {"rate_queries", q.RateQueries},
		{"in_flight_commands", q.InFlightCommands}, {"in_flight_queries", q.InFlightQueries}, {"in_flight_waits", q.InFlightWaits}} {
		if kv[1] != "" {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "defaults"
	}
	return strings.Join(out, " ")
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
