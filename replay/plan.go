package replay

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// PlannedRate is the rebuild speed a plan's estimate assumes: events of the
// log per second for all projections together, as measured on a 2-core
// machine (docs/replay.md). Real speed depends on the machine and load.
const PlannedRate = 30000

// Plan is what a rebuild would do (`rebuild --dry-run`).
type Plan struct {
	// Head is the log's head now.
	Head        event.Position
	Projections []Planned
	// Estimate is the expected duration at PlannedRate.
	Estimate time.Duration
}

// Planned is what a rebuild would do to one projection.
type Planned struct {
	Name  string
	Scope string // all, tenant or from
	// Tables lists the live tables and the shadow table each would be
	// rebuilt into (none for --from, which works in place).
	Tables []TablePlan
	// Resume reports that an interrupted rebuild of the same scope exists
	// and would be continued from ShadowCheckpoint.
	Resume           bool
	ShadowCheckpoint event.Position
	// Conflict explains why the rebuild would be refused: one of the same
	// slot is running already, an interrupted one has other flags, or (for
	// a tenant) a rebuild of every tenant is in progress. It never names
	// or hints at another tenant.
	Conflict string
	// Events counts the log events the build would read; TenantEvents
	// (with a tenant) those of the tenant among them.
	Events       int64
	TenantEvents int64
	// Streams counts the streams --from would re-derive.
	Streams int64
	// LiveCheckpoint is the live projection's checkpoint now.
	LiveCheckpoint event.Position
}

// TablePlan names a live table and its shadow.
type TablePlan struct{ Live, Shadow string }

// Plan reports what Rebuild would do with o, changing nothing.
func (s *Service) Plan(ctx context.Context, o RebuildOptions) (Plan, error) {
	ps, err := s.check(o)
	if err != nil {
		return Plan{}, err
	}
	head, err := s.cfg.Log.Head(ctx)
	if err != nil {
		return Plan{}, err
	}
	out := Plan{Head: head}
	keys := []string{}
	for _, p := range ps {
		keys = append(keys, p.Name(), p.Name()+rebuildSuffix, slotKey(p.Name(), o.Tenant))
	}
	cps, err := s.checkpoints(ctx, keys...)
	if err != nil {
		return Plan{}, err
	}
	var most int64
	for _, p := range ps {
		pl := Planned{Name: p.Name(), Scope: o.scope(), LiveCheckpoint: cps[p.Name()].Position}
		if o.From != nil {
			touched, err := s.touchedStreams(ctx, *o.From, pl.LiveCheckpoint, o.Tenant, p.EventTypes())
			if err != nil {
				return Plan{}, err
			}
			for tenant, streams := range touched {
				pl.Streams += int64(len(streams))
				n, err := s.countStreamEvents(ctx, tenant, streams, pl.LiveCheckpoint)
				if err != nil {
					return Plan{}, err
				}
				pl.Events += n
			}
			out.Projections = append(out.Projections, pl)
			most = max(most, pl.Events)
			continue
		}
		for _, t := range p.Tables() {
			pl.Tables = append(pl.Tables, TablePlan{Live: t, Shadow: t + slotSuffix(o.Tenant)})
		}
		start := event.Position{}
		key := slotKey(p.Name(), o.Tenant)
		if o.Tenant != "" {
			// What prepareShadow refuses, the plan reports (no other
			// tenant's slot is looked at).
			if cp, ok := cps[p.Name()+rebuildSuffix]; ok {
				if m, err := parseMeta(cp.Rebuild); err != nil || (m != nil && m.Scope == "all") {
					pl.Conflict = allScopeMessage(p.Name())
				}
			}
		}
		if running, err := projections.LeaseHeld(ctx, s.cfg.Pool, key); err != nil {
			return Plan{}, err
		} else if running && pl.Conflict == "" {
			pl.Conflict = runningMessage(p.Name(), o.Tenant)
		}
		if cp, ok := cps[key]; ok {
			m, err := parseMeta(cp.Rebuild)
			if err != nil {
				return Plan{}, err
			}
			wantHash := ""
			if o.Tenant != "" {
				wantHash = tenantHash(o.Tenant)
			}
			if m != nil && m.Scope == o.scope() && m.TenantSHA256 == wantHash {
				pl.Resume, pl.ShadowCheckpoint, start = true, cp.Position, cp.Position
			} else if pl.Conflict == "" && o.Tenant != "" {
				pl.Conflict = fmt.Sprintf("the rebuild slot of %s is taken: retry later, or ask an operator", p.Name())
			} else if pl.Conflict == "" {
				pl.Conflict = fmt.Sprintf("an interrupted rebuild of %s with other flags exists: finish it with its own flags or drop it with --abort", p.Name())
			}
		}
		if pl.Events, _, err = s.cfg.Log.Lag(ctx, start); err != nil {
			return Plan{}, err
		}
		if o.Tenant != "" {
			if pl.TenantEvents, err = s.tenantEvents(ctx, o.Tenant, start); err != nil {
				return Plan{}, err
			}
		}
		most = max(most, pl.Events)
		out.Projections = append(out.Projections, pl)
	}
	out.Estimate = time.Duration(float64(most) / PlannedRate * float64(time.Second))
	return out, nil
}

func (s *Service) countStreamEvents(ctx context.Context, tenant string, streams []string, until event.Position) (int64, error) {
	var n int64
	err := s.cfg.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant_id = $1 AND stream_id = ANY($2::text[])
AND (tx_id, position) <= ($3::text::xid8, $4::bigint)`, tenant, streams, strconv.FormatUint(until.Major, 10), int64(until.Minor)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count events of touched streams: %w", err)
	}
	return n, nil
}

// tenantEvents counts tenant's events after start in the log, where the
// log can count them (PostgreSQL, through its index by tenant); elsewhere
// it is the whole log's lag, which bounds them.
func (s *Service) tenantEvents(ctx context.Context, tenant string, start event.Position) (int64, error) {
	if tc, ok := s.cfg.Log.(interface {
		TenantLag(ctx context.Context, tenant string, after event.Position) (int64, error)
	}); ok {
		n, err := tc.TenantLag(ctx, tenant, start)
		if err != nil {
			return 0, fmt.Errorf("count the tenant's events: %w", err)
		}
		return n, nil
	}
	n, _, err := s.cfg.Log.Lag(ctx, start)
	return n, err
}
