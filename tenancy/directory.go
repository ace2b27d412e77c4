package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/internal/pgsession"
)

// NotifyChannel carries the push: tenants' trigger sends "<id>:<version>"
// at the commit of every change.
const NotifyChannel = "strata_tenants"

// DefaultReload is how often a Directory reloads everything, the safety net
// under the push (a notification lost with a connection, a change made
// while nobody listened).
const DefaultReload = 10 * time.Second

// Entry is what a serving process knows of a tenant: what it enforces.
type Entry struct {
	Status  Status
	Quotas  Quotas
	Limits  Limits
	Version int64
	Tier    string // "": none (tiers.go); Limits are its quotas over the tier's
	Cohort  string // "": none
	// Placement is the database the tenant's data lives in (migration
	// 013; DefaultPlacement, the shared one, unless placed elsewhere):
	// serving processes route the tenant's requests by it.
	Placement string
	seq       uint64 // the Directory's apply counter when it was applied
}

// DirectoryConfig configures a Directory.
type DirectoryConfig struct {
	// Pool reads the directory: the application role, which may read
	// tenants' id, status, quotas and version and nothing else of them.
	Pool *pgxpool.Pool
	// Reload is the period of the full reload (default DefaultReload).
	Reload time.Duration
	// Require, if set, decides whether only active tenants of the
	// directory are served (STRATA_REQUIRE_TENANT_DIRECTORY); nil: the
	// installation's setting, engine_settings.require_tenant_directory,
	// read with every full reload.
	Require *bool
	Logger  *slog.Logger
	// AppliedFunc, if set, is called after a change of one tenant reached
	// this process through the push (metrics, tests).
	AppliedFunc func(id domain.TenantID, e Entry)
	// Lease, if set, makes the Directory a member of the erasure's
	// acknowledgement barrier (member.go): Run registers it in
	// tenant_directory_members, heartbeats every Lease/3, acknowledges
	// barrier notifications, and the Directory refuses every tenant (503)
	// whenever it has not heartbeated within Lease
	// (STRATA_TENANT_DIRECTORY_LEASE; 0: no membership, no fence).
	Lease  time.Duration
	Member MemberInfo
	// NowFunc is the fence's clock (default time.Now; tests move it).
	NowFunc func() time.Time
	// AckFunc, if set, is called after each barrier acknowledgement.
	AckFunc func(version int64)
}

// Directory is a serving process's copy of the tenant directory. Lookups
// are lock-free reads of an immutable map swapped on every change.
type Directory struct {
	cfg     DirectoryConfig
	mu      sync.Mutex // serialises writers of entries
	entries atomic.Pointer[map[domain.TenantID]Entry]
	require atomic.Bool
	loaded  atomic.Bool
	seq     atomic.Uint64
	tiers   atomic.Pointer[map[string]Quotas] // tier -> quotas (tiers.go)
	member  membership
}

// NewDirectory returns an empty Directory; Load fills it, Run keeps it
// current.
func NewDirectory(cfg DirectoryConfig) *Directory {
	if cfg.Reload <= 0 {
		cfg.Reload = DefaultReload
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	d := &Directory{cfg: cfg}
	d.member.id = newMemberID()
	empty := map[domain.TenantID]Entry{}
	d.entries.Store(&empty)
	if cfg.Require != nil {
		d.require.Store(*cfg.Require)
	}
	return d
}

// Loaded reports whether a full load has succeeded once. Until then a
// Gate refuses every request (503): it cannot tell a suspended tenant.
func (d *Directory) Loaded() bool { return d.loaded.Load() }

// Required reports whether only active tenants of the directory are served.
func (d *Directory) Required() bool { return d.require.Load() }

// Lookup returns what this process knows of the tenant.
func (d *Directory) Lookup(id domain.TenantID) (Entry, bool) {
	e, ok := (*d.entries.Load())[id]
	return e, ok
}

// Rates and Slots are the tenant's quotas for the limiters
// (httpapi.RateLimitConfig.TenantFunc, TenantLimitConfig.TenantFunc).
func (d *Directory) Rates(id domain.TenantID) httpapi.TenantRates {
	e, _ := d.Lookup(id)
	return e.Limits.Rates
}

func (d *Directory) Slots(id domain.TenantID) httpapi.TenantSlots {
	e, _ := d.Lookup(id)
	return e.Limits.Slots
}

type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}

const entryColumns = `id, status, quotas, version, coalesce(tier, ''), coalesce(cohort, ''), placement`

func scanEntry(row pgx.Row) (domain.TenantID, Entry, error) {
	var id domain.TenantID
	var e Entry
	var raw []byte
	if err := row.Scan(&id, &e.Status, &raw, &e.Version, &e.Tier, &e.Cohort, &e.Placement); err != nil {
		return id, e, err
	}
	e.Quotas = decodeQuotas(raw)
	e.Limits = e.Quotas.Limits()
	return id, e, nil
}

// Load reads the whole directory (and the installation's setting) and
// replaces what this process knows, except entries a push brought in
// while it read that are newer than what it read.
func (d *Directory) Load(ctx context.Context) error {
	return d.load(ctx, d.cfg.Pool)
}

func (d *Directory) load(ctx context.Context, q querier) error {
	start := d.seq.Load()
	if d.cfg.Require == nil {
		var raw []byte
		err := q.QueryRow(ctx, `SELECT value FROM engine_settings WHERE name = 'require_tenant_directory'`).Scan(&raw)
		var req bool
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read engine_settings: %w", err)
		default:
			_ = json.Unmarshal(raw, &req)
		}
		d.require.Store(req)
	}
	tiers, err := loadTiers(ctx, q)
	if err != nil {
		return err
	}
	rows, err := q.Query(ctx, `SELECT `+entryColumns+` FROM tenants`)
	if err != nil {
		return fmt.Errorf("read the tenant directory: %w", err)
	}
	fresh := map[domain.TenantID]Entry{}
	for rows.Next() {
		id, e, err := scanEntry(rows)
		if err != nil {
			rows.Close()
			return err
		}
		fresh[id] = e
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the tenant directory: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, e := range *d.entries.Load() {
		if f, ok := fresh[id]; e.seq > start && (!ok || e.Version > f.Version) {
			fresh[id] = e // pushed while we read, and newer
		}
	}
	for id, e := range fresh {
		fresh[id] = withTiers(e, tiers)
	}
	d.tiers.Store(&tiers)
	d.entries.Store(&fresh)
	d.loaded.Store(true)
	return nil
}

// apply stores e for id unless what is known is as new.
func (d *Directory) apply(id domain.TenantID, e Entry) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := *d.entries.Load()
	if old, ok := cur[id]; ok && old.Version >= e.Version {
		return false
	}
	e.seq = d.seq.Add(1)
	next := make(map[domain.TenantID]Entry, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[id] = e
	d.entries.Store(&next)
	return true
}

// refresh reads one tenant's row and applies it.
func (d *Directory) refresh(ctx context.Context, q querier, id domain.TenantID) (Entry, bool, error) {
	_, e, err := scanEntry(q.QueryRow(ctx, `SELECT `+entryColumns+` FROM tenants WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	e = withTiers(e, *d.tierQuotas())
	d.apply(id, e)
	return e, true, nil
}

// Check is the strong check: it reads the tenant's row now, not the cache
// (which it updates), for decisions that must not rest on a push having
// arrived, such as a destructive step. ErrNotFound when there is no row.
func (d *Directory) Check(ctx context.Context, id domain.TenantID) (Entry, error) {
	e, ok, err := d.refresh(ctx, d.cfg.Pool, id)
	if err != nil {
		return Entry{}, fmt.Errorf("check tenant %s: %w", id, err)
	}
	if !ok {
		return Entry{}, fmt.Errorf("%w %q", ErrNotFound, id)
	}
	return e, nil
}

// Run keeps the directory current until ctx ends: it LISTENs on
// NotifyChannel on a connection of its own, reloads everything after every
// (re)connection (changes made while it was not listening sent
// notifications nobody received) and every Reload period, and applies each
// pushed change by reading that tenant's row on the same connection. It
// returns nil when ctx ends; connection failures are logged and retried
// (the cache keeps its last state meanwhile).
func (d *Directory) Run(ctx context.Context) error {
	const retry = time.Second
	if d.cfg.Lease > 0 {
		defer d.unregister()
	}
	for ctx.Err() == nil {
		c, err := d.cfg.Pool.Acquire(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.cfg.Logger.Warn("tenant directory: cannot connect to listen for changes; retrying", "error", err.Error())
			}
			pgsession.Sleep(ctx, retry)
			continue
		}
		conn := c.Hijack()
		err = d.listen(ctx, conn)
		pgsession.Close(conn)
		if ctx.Err() == nil {
			d.cfg.Logger.Warn("tenant directory: lost the connection listening for changes; reconnecting", "error", fmt.Sprint(err))
			pgsession.Sleep(ctx, retry)
		}
	}
	return nil
}

func (d *Directory) listen(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `LISTEN `+NotifyChannel); err != nil {
		return err
	}
	member := d.cfg.Lease > 0
	if member {
		if _, err := conn.Exec(ctx, `LISTEN `+BarrierChannel); err != nil {
			return err
		}
		if err := d.register(ctx, conn); err != nil {
			return err
		}
	}
	if err := d.load(ctx, conn); err != nil {
		return err
	}
	var beat time.Time
	if member {
		if err := d.heartbeat(ctx, conn); err != nil {
			return err
		}
		beat = time.Now().Add(d.cfg.Lease / 3)
	}
	next := time.Now().Add(d.cfg.Reload)
	for {
		until := next
		if member && beat.Before(until) {
			until = beat
		}
		wctx, cancel := context.WithDeadline(ctx, until)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && errors.Is(wctx.Err(), context.DeadlineExceeded) && !conn.IsClosed():
			if member && !time.Now().Before(beat) {
				if err := d.heartbeat(ctx, conn); err != nil {
					return err
				}
				beat = time.Now().Add(d.cfg.Lease / 3)
			}
			if !time.Now().Before(next) {
				if err := d.load(ctx, conn); err != nil {
					return err
				}
				next = time.Now().Add(d.cfg.Reload)
			}
			continue
		case err != nil:
			return err
		}
		if n.Channel == BarrierChannel {
			if err := d.onBarrier(ctx, conn, n.Payload); err != nil {
				return err
			}
			continue
		}
		if tierPayload(n.Payload) { // a tier changed: any tenant may be in it
			if err := d.load(ctx, conn); err != nil {
				return err
			}
			continue
		}
		id, version, ok := parsePayload(n.Payload)
		if !ok {
			continue
		}
		if e, known := d.Lookup(id); known && e.Version >= version {
			continue // a reload got there first
		}
		e, found, err := d.refresh(ctx, conn, id)
		if err != nil {
			return err
		}
		if found && d.cfg.AppliedFunc != nil {
			d.cfg.AppliedFunc(id, e)
		}
	}
}

func parsePayload(p string) (domain.TenantID, int64, bool) {
	idPart, v, ok := strings.Cut(p, ":")
	if !ok {
		return "", 0, false
	}
	id, err := domain.ParseTenantID(idPart)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return id, n, err == nil
}
