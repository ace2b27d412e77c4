package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore/postgres"
	"github.com/strata-es/strata/placement"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/tenancy"
)

const tenantsMoveUsage = `  strata tenants move T --to P [--json]                         move T to placement P while it writes (resumable: run it again)
  strata tenants move T --finish [--json]                       purge T's rows from the placement it left (no going back after)
  strata tenants move T --back [--json]                         before --finish: return T to the placement it left, nothing lost
  strata tenants moves [T] [--json]                             the moves, their phase, progress and freeze
`

// cmdTenantsMove runs `tenants move` and `tenants moves`; ok false for
// another subcommand.
func cmdTenantsMove(ctx context.Context, sub string, args []string, e env, stdout, stderr io.Writer) (int, bool) {
	if sub != "move" && sub != "moves" {
		return 0, false
	}
	fs := flag.NewFlagSet("tenants "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	to := fs.String("to", "", "move: the target placement")
	finish := fs.Bool("finish", false, "move: purge the placement the tenant left")
	back := fs.Bool("back", false, "move: return to the placement the tenant left")
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
	var tenant domain.TenantID
	if id != "" || sub == "move" {
		t, err := domain.ParseTenantID(id)
		if err != nil {
			return usageError(stderr, fmt.Sprintf("tenants %s needs a tenant ID matching [a-z0-9-]{1,63}", sub)), true
		}
		tenant = t
	}
	modes := 0
	for _, on := range []bool{*to != "", *finish, *back} {
		if on {
			modes++
		}
	}
	if sub == "move" && modes != 1 {
		return usageError(stderr, "tenants move needs one of --to P, --finish or --back"), true
	}
	store, owner, closeStore, err := openTenantStorePool(ctx, e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata tenants:", err)
		return exitFailure, true
	}
	defer closeStore()
	sides := newMoveSides(e, owner)
	defer sides.close()
	lease, err := e.duration("STRATA_TENANT_DIRECTORY_LEASE", tenancy.DefaultLease)
	if err != nil {
		return usageError(stderr, err.Error()), true
	}
	mods := e.mods
	var tables []string
	for _, p := range mods.Projections() {
		tables = append(tables, p.Tables()...)
	}
	lastPhase := ""
	mover := placement.NewMover(placement.MoverConfig{Control: owner, Directory: store, Open: sides.open,
		Projections: projections.Names(mods.Projections()), Tables: tables, Lease: lease,
		Logger: slog.New(slog.NewTextHandler(stderr, nil)),
		LogEnd: func(ctx context.Context, s placement.Side) (event.Position, error) {
			return postgres.New(s.App, s.Proj).LastCommitted(ctx)
		},
		Progress: func(mv placement.Move) {
			if mv.Phase != lastPhase || mv.Phase == placement.PhaseCopying {
				fmt.Fprintf(stderr, "move %s %s -> %s: %s, %d events copied, %d to go, %d idempotency records\n",
					mv.Tenant, mv.Source, mv.Target, mv.Phase, mv.CopiedEvents, mv.Remaining, mv.CopiedKeys)
				lastPhase = mv.Phase
			}
		}})
	subject := "cli:" + osUser()
	if sub == "moves" {
		list, err := mover.Moves(ctx, tenant)
		if err != nil {
			return tenantsFailed(stderr, err), true
		}
		if *asJSON {
			if list == nil {
				list = []placement.Move{}
			}
			_ = json.NewEncoder(stdout).Encode(map[string]any{"moves": list})
			return exitOK, true
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTENANT\tFROM\tTO\tPHASE\tEVENTS\tKEYS\tFREEZE\tSTARTED\tERROR")
		for _, mv := range list {
			freeze := "-"
			if mv.FreezeMS != nil {
				freeze = fmt.Sprintf("%.1fms", *mv.FreezeMS)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", mv.ID, mv.Tenant, mv.Source, mv.Target, mv.Phase, mv.CopiedEvents, mv.CopiedKeys,
				freeze, mv.StartedAt.UTC().Format(time.RFC3339), mv.LastError)
		}
		tw.Flush()
		return exitOK, true
	}
	var mv placement.Move
	switch {
	case *finish:
		mv, err = mover.Finish(ctx, tenant)
	case *back:
		mv, err = mover.Back(ctx, subject, tenant)
	default:
		if mv, err = mover.Start(ctx, subject, tenant, *to); err == nil {
			mv, err = mover.Resume(ctx, tenant)
		}
	}
	if err != nil {
		return tenantsFailed(stderr, err), true
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(mv)
		return exitOK, true
	}
	switch mv.Phase {
	case placement.PhaseSwitched:
		fmt.Fprintf(stdout, "tenant %s is in %s (write freeze %.1f ms); %s keeps its rows until `strata tenants move %s --finish` (or `--back`)\n",
			mv.Tenant, mv.Target, deref(mv.FreezeMS), mv.Source, mv.Tenant)
	case placement.PhaseFinished:
		fmt.Fprintf(stdout, "tenant %s is in %s; its rows in %s are purged: %s\n", mv.Tenant, mv.Target, mv.Source, mv.Receipt)
	default:
		fmt.Fprintf(stdout, "tenant %s: move %s\n", mv.Tenant, mv.Phase)
	}
	return exitOK, true
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// moveSides opens the pools of the placements a move touches, once each.
type moveSides struct {
	e     env
	owner *pgxpool.Pool
	open_ map[string]placement.Side
	pools []*pgxpool.Pool
}

func newMoveSides(e env, owner *pgxpool.Pool) *moveSides {
	return &moveSides{e: e, owner: owner, open_: map[string]placement.Side{}}
}

func (m *moveSides) open(ctx context.Context, name string) (placement.Side, error) {
	if s, ok := m.open_[name]; ok {
		return s, nil
	}
	var ownerURL string
	if name == placement.Pool {
		u, _, stop, err := m.e.database(ctx, discardLog)
		if err != nil {
			return placement.Side{}, err
		}
		_ = stop // the control connection's database: already open, stopped by its opener
		ownerURL = u
	} else {
		p, err := placement.NewRegistry(m.owner).Get(ctx, name)
		if err != nil {
			return placement.Side{}, err
		}
		ownerURL = p.URL
	}
	c, err := placementConns(ownerURL)
	if err != nil {
		return placement.Side{}, err
	}
	s := placement.Side{Name: name}
	for _, p := range []struct {
		pool **pgxpool.Pool
		url  string
		role string
	}{{&s.App, c.app.url, db.RoleApp}, {&s.Proj, c.proj.url, db.RoleProjector}, {&s.Owner, ownerURL, db.RoleProjector}} {
		pool, err := db.OpenPool(ctx, p.url, db.PoolConfig{Role: p.role, MaxConns: 4, AppName: "strata-move"})
		if err != nil {
			return placement.Side{}, fmt.Errorf("placement %s: %w", name, err)
		}
		m.pools = append(m.pools, pool)
		*p.pool = pool
	}
	if s.Keys, err = keyring(ctx, m.e, s.App); err != nil {
		return placement.Side{}, err
	}
	m.open_[name] = s
	return s, nil
}

func (m *moveSides) close() {
	for _, p := range m.pools {
		p.Close()
	}
}
