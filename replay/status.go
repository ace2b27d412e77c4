package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// Status is one projection as `strata replay status` shows it.
type Status struct {
	projections.ProjectionStatus
	// Generation identifies the projection's current rows.
	Generation string
	// Rebuild is the rebuild of every tenant in progress or interrupted,
	// if any.
	Rebuild *RebuildStatus
	// TenantRebuilds are the rebuilds of single tenants in progress or
	// interrupted, each in its own slot (the tenant is not recorded, only
	// a hash of it; `strata replay rebuild --tenant T --abort` drops one).
	TenantRebuilds []RebuildStatus
	// Leftovers are tables a swap replaced and could not drop (the next
	// rebuild drops them).
	Leftovers []string
}

// RebuildStatus is a rebuild's state, from its checkpoint row.
type RebuildStatus struct {
	// Scope is "all" or "tenant" (the tenant itself is not recorded, only
	// a hash of it).
	Scope string
	// Checkpoint is how far the shadow tables are built; LagEvents how many
	// events of the log are after it.
	Checkpoint event.Position
	LagEvents  int64
	// Active reports whether a rebuild is running now (a session holds the
	// shadow's lease); an inactive one was interrupted and resumes when
	// started again with the same flags.
	Active    bool
	Tables    map[string]string // live -> shadow
	StartedAt time.Time
	// PendingIndexes counts the shadow's indexes still to build before
	// the swap.
	PendingIndexes int
	ParkedStreams  int64
}

// rebuildMeta is the rebuild column of a <name>__rebuild row.
type rebuildMeta struct {
	Of              string            `json:"of"`
	Scope           string            `json:"scope"` // all | tenant
	TenantSHA256    string            `json:"tenant_sha256,omitempty"`
	Tables          map[string]string `json:"tables"`                     // live -> shadow
	DeferredIndexes []string          `json:"deferred_indexes,omitempty"` // and, with Fold, enabling row-level security
	// Fold: the shadow was made for a fold (its row-level security is
	// enabled after the rows are written, among DeferredIndexes).
	Fold      bool      `json:"fold,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

func parseMeta(raw []byte) (*rebuildMeta, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m rebuildMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("rebuild state: %w", err)
	}
	return &m, nil
}

// monitor returns a projections.Monitor over the service's pools.
func (s *Service) monitor(app bool) *projections.Monitor {
	pool := s.cfg.Pool
	if app && s.cfg.App != nil {
		pool = s.cfg.App
	}
	return projections.NewMonitor(projections.MonitorConfig{App: pool, Log: s.cfg.Log, Names: s.Names()})
}

// Status reports every projection over the whole log: checkpoint, head,
// lag, state, parked streams and dead letters, and any rebuild.
func (s *Service) Status(ctx context.Context) ([]Status, error) {
	list, err := s.monitor(false).All(ctx)
	if err != nil {
		return nil, err
	}
	return s.decorate(ctx, list)
}

// TenantStatus reports every projection as one tenant sees it: lag counts
// the tenant's events (needs Config.App), parked streams and dead letters
// are the tenant's own.
func (s *Service) TenantStatus(ctx context.Context, tenant string) ([]Status, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, err
	}
	if s.cfg.App == nil {
		return nil, fmt.Errorf("%w: a tenant's status needs the application role's pool", ErrInvalid)
	}
	list, err := s.monitor(true).Tenant(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out, err := s.decorate(ctx, list)
	if err != nil {
		return nil, err
	}
	counts, err := s.tenantCounts(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for i := range out {
		c := counts[out[i].Name]
		out[i].ParkedStreams, out[i].ParkedLetters = c[0], c[1]
		out[i].Rebuild, out[i].TenantRebuilds, out[i].Leftovers = nil, nil, nil // other tenants' business
	}
	return out, nil
}

// tenantCounts counts a tenant's parked streams and letters per projection
// (current generations).
func (s *Service) tenantCounts(ctx context.Context, tenant string) (map[string][2]int64, error) {
	out := map[string][2]int64{}
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	b.Queue(`SELECT c.projection,
    (SELECT count(*) FROM parked_streams p WHERE p.tenant_id = $1 AND p.projection = c.projection AND p.generation = c.generation),
    (SELECT count(*) FROM dead_letters d WHERE d.tenant_id = $1 AND d.projection = c.projection AND d.generation = c.generation AND d.status = 'parked')
FROM projection_checkpoints c WHERE c.projection = ANY($2::text[])`, tenant, s.Names()).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var name string
			var c [2]int64
			if err := rows.Scan(&name, &c[0], &c[1]); err != nil {
				return err
			}
			out[name] = c
		}
		return rows.Err()
	})
	if err := s.cfg.Pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	return out, nil
}

// decorate adds generations, rebuilds and leftovers to the monitor's view.
func (s *Service) decorate(ctx context.Context, list []projections.ProjectionStatus) ([]Status, error) {
	// Every row: tenants' rebuild slots have keys of their own.
	cps, err := s.checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	active, err := heldRebuildLeases(ctx, s.cfg.Pool)
	if err != nil {
		return nil, err
	}
	leftovers, err := s.leftovers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(list))
	for _, st := range list {
		o := Status{ProjectionStatus: st, Generation: cps[st.Name].Generation}
		rebuildOf := func(key string) (*RebuildStatus, error) {
			cp, ok := cps[key]
			if !ok {
				return nil, nil
			}
			m, err := parseMeta(cp.Rebuild)
			if err != nil || m == nil {
				return nil, err
			}
			rs := &RebuildStatus{Scope: m.Scope, Checkpoint: cp.Position, Tables: m.Tables, StartedAt: m.StartedAt,
				PendingIndexes: len(m.DeferredIndexes), ParkedStreams: cp.ParkedStreams, Active: active[key]}
			if rs.LagEvents, _, err = s.cfg.Log.Lag(ctx, cp.Position); err != nil {
				return nil, err
			}
			return rs, nil
		}
		if o.Rebuild, err = rebuildOf(st.Name + rebuildSuffix); err != nil {
			return nil, err
		}
		var slots []string
		for key := range cps {
			if strings.HasPrefix(key, st.Name+rebuildSuffix+"_") {
				slots = append(slots, key)
			}
		}
		slices.Sort(slots)
		for _, key := range slots {
			rs, err := rebuildOf(key)
			if err != nil {
				return nil, err
			}
			if rs != nil {
				o.TenantRebuilds = append(o.TenantRebuilds, *rs)
			}
		}
		if p, ok := s.byName[st.Name]; ok {
			for _, t := range p.Tables() {
				if slices.Contains(leftovers, t+replacedSuffix) {
					o.Leftovers = append(o.Leftovers, t+replacedSuffix)
				}
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// leftovers lists tables replaced by a swap and not dropped yet.
func (s *Service) leftovers(ctx context.Context) ([]string, error) {
	rows, err := s.cfg.Pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE '%' || $2`, db.Schema, replacedSuffix)
	if err != nil {
		return nil, fmt.Errorf("list replaced tables: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// heldRebuildLeases reports which rebuild keys some session holds.
func heldRebuildLeases(ctx context.Context, q projections.Querier) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT projection FROM projection_checkpoints WHERE rebuild IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("read rebuilds: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read rebuilds: %w", err)
	}
	out := map[string]bool{}
	for _, k := range keys {
		if out[k], err = projections.LeaseHeld(ctx, q, k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// String renders a rebuild for the status table.
func (r *RebuildStatus) String() string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	state := "interrupted"
	if r.Active {
		state = "running"
	}
	fmt.Fprintf(&b, "%s (%s), %d events behind", state, r.Scope, r.LagEvents)
	if r.PendingIndexes > 0 {
		fmt.Fprintf(&b, ", %d indexes to build", r.PendingIndexes)
	}
	return b.String()
}

// OtherCheckpoints returns the checkpoint rows of readers the service does
// not know as projections (the relay's relay_<topic>, a projection of
// another binary), without rebuilds', partitions' and broker-fed consumers' rows
// (Consumers lists those), by name.
func (s *Service) OtherCheckpoints(ctx context.Context) ([]projections.Checkpoint, error) {
	all, err := s.checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	var out []projections.Checkpoint
	for name, cp := range all {
		if _, known := s.byName[name]; known || cp.Rebuild != nil || cp.Consumer != nil || cp.Partition != nil || strings.HasSuffix(name, rebuildSuffix) {
			continue
		}
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b projections.Checkpoint) int { return strings.Compare(a.Projection, b.Projection) })
	return out, nil
}
