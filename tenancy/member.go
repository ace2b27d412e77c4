package tenancy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

// Membership and the acknowledgement barrier (docs/tenants.md, "Erasure",
// step 1).
//
// A Directory with a lease (DirectoryConfig.Lease) registers itself in
// tenant_directory_members when Run connects and heartbeats every third of
// the lease on its listening connection. The erasure workflow, after it
// committed a tenant's `erasing`, sends BarrierChannel notifications
// "<version>:<tenant>" until every live member (heartbeat within the lease)
// has acknowledged a seen_version >= that version. A member acknowledges a
// barrier notification once every tenant request it admitted before is
// finished: NOTIFY delivers in commit order on one connection, so by then
// it has applied the change (it is refusing the tenant) and no request of
// the tenant is in flight. A member whose heartbeat is older than the lease
// is treated as gone; that is safe because a Directory that has not
// heartbeated within its lease refuses every tenant (503 unavailable, the
// fence) and, once it can heartbeat again, reloads the whole directory
// before serving anyone.

// BarrierChannel carries the erasure's barrier notifications.
const BarrierChannel = "strata_tenants_barrier"

// DefaultLease is the membership lease (STRATA_TENANT_DIRECTORY_LEASE).
const DefaultLease = 10 * time.Second

// drainLimit bounds how long a member waits for a tenant's in-flight
// requests before acknowledging; past it, it does not acknowledge (the
// barrier resends, and times out if they never finish).
const drainLimit = 30 * time.Second

// MemberInfo describes a serving process in tenant_directory_members.
type MemberInfo struct {
	Role string // e.g. "command,query"
	Host string // default os.Hostname
	PID  int    // default os.Getpid
}

type membership struct {
	id       string
	lastOK   atomic.Int64 // NowFunc().UnixNano() at the start of the last heartbeat that succeeded; 0: never
	inflight sync.Map     // domain.TenantID -> *atomic.Int64
	acked    atomic.Int64 // the highest version acknowledged
}

func newMemberID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// MemberID is this process's row in tenant_directory_members.
func (d *Directory) MemberID() string { return d.member.id }

func (d *Directory) now() time.Time { return d.cfg.NowFunc() }

// Fenced reports whether this process refuses every tenant because it has
// not heartbeated within its lease (always false without a lease).
func (d *Directory) Fenced() bool {
	if d.cfg.Lease <= 0 {
		return false
	}
	last := d.member.lastOK.Load()
	return last == 0 || d.now().Sub(time.Unix(0, last)) > d.cfg.Lease
}

func (d *Directory) fenceError() *httpapi.Error {
	return &httpapi.Error{Status: http.StatusServiceUnavailable, Code: httpapi.CodeUnavailable,
		Message: "this process has lost touch with the tenant directory: retry later", RetryAfter: 2 * time.Second}
}

func (d *Directory) inflight(id domain.TenantID) *atomic.Int64 {
	if c, ok := d.member.inflight.Load(id); ok {
		return c.(*atomic.Int64)
	}
	c, _ := d.member.inflight.LoadOrStore(id, new(atomic.Int64))
	return c.(*atomic.Int64)
}

// InFlight is how many admitted requests of the tenant are running.
func (d *Directory) InFlight(id domain.TenantID) int64 { return d.inflight(id).Load() }

// register inserts this member's row (again after a reconnection: a row
// deleted as stale comes back).
func (d *Directory) register(ctx context.Context, conn *pgx.Conn) error {
	info := d.cfg.Member
	if info.Host == "" {
		info.Host, _ = os.Hostname()
	}
	if info.PID == 0 {
		info.PID = os.Getpid()
	}
	_, err := conn.Exec(ctx, `INSERT INTO tenant_directory_members (member_id, role, host, pid, seen_version) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (member_id) DO NOTHING`, d.member.id, info.Role, info.Host, info.PID, d.member.acked.Load())
	if err != nil {
		return fmt.Errorf("register in tenant_directory_members: %w", err)
	}
	return nil
}

// heartbeat renews the lease. When the lease had run out by the time the
// heartbeat committed, the barrier may have counted this process as gone
// and gone ahead without it: it reloads the whole directory before it
// lifts the fence, so that a change it has not processed yet (still
// queued behind the heartbeat) is applied before it serves anyone.
func (d *Directory) heartbeat(ctx context.Context, conn *pgx.Conn) error {
	start := d.now()
	hctx, cancel := context.WithTimeout(ctx, d.cfg.Lease/2)
	defer cancel()
	tag, err := conn.Exec(hctx, `UPDATE tenant_directory_members SET heartbeat_at = now() WHERE member_id = $1`, d.member.id)
	if err == nil && tag.RowsAffected() == 0 {
		err = d.register(hctx, conn)
	}
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if d.Fenced() {
		if err := d.load(ctx, conn); err != nil {
			return err
		}
	}
	d.member.lastOK.Store(start.UnixNano())
	return nil
}

// Join makes this process a member before it serves anyone: it registers
// (or renews its heartbeat) and then loads the whole directory, on a pool
// connection, so that serve admits requests from its start rather than
// answering 503 until Run's listener has heartbeated. Loading after
// registering is what makes it safe: an erasure's `erasing` committed
// before the registration is in the load; one committed after it finds
// this process among the members and waits for its acknowledgement (Run
// acknowledges the barrier's resent notifications). Without a lease it is
// Load.
func (d *Directory) Join(ctx context.Context) error {
	if d.cfg.Lease <= 0 {
		return d.Load(ctx)
	}
	start := d.now()
	c, err := d.cfg.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	conn := c.Conn()
	tag, err := conn.Exec(ctx, `UPDATE tenant_directory_members SET heartbeat_at = now() WHERE member_id = $1`, d.member.id)
	if err == nil && tag.RowsAffected() == 0 {
		err = d.register(ctx, conn)
	}
	if err != nil {
		return fmt.Errorf("join the tenant directory: %w", err)
	}
	if err := d.load(ctx, conn); err != nil {
		return err
	}
	d.member.lastOK.Store(start.UnixNano())
	return nil
}

// unregister removes this member's row when Run ends.
func (d *Directory) unregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = d.cfg.Pool.Exec(ctx, `DELETE FROM tenant_directory_members WHERE member_id = $1`, d.member.id)
}

// onBarrier acknowledges a barrier notification once the tenant's
// admitted requests are done: at once on conn when none is in flight,
// else from a goroutine on the pool.
func (d *Directory) onBarrier(ctx context.Context, conn *pgx.Conn, payload string) error {
	v, idPart, ok := strings.Cut(payload, ":")
	if !ok {
		return nil
	}
	version, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil
	}
	id, err := domain.ParseTenantID(idPart)
	if err != nil {
		return nil
	}
	if d.member.acked.Load() >= version {
		return nil
	}
	c := d.inflight(id)
	if c.Load() == 0 {
		return d.ack(ctx, conn, version)
	}
	go func() {
		deadline := time.Now().Add(drainLimit)
		for c.Load() > 0 {
			if time.Now().After(deadline) || ctx.Err() != nil {
				d.cfg.Logger.Warn("tenant directory: requests of a tenant being erased are still running; not acknowledging the barrier",
					"tenant", string(id), "in_flight", c.Load())
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := d.ack(ctx, nil, version); err != nil {
			d.cfg.Logger.Warn("tenant directory: cannot acknowledge the barrier", "error", err.Error())
		}
	}()
	return nil
}

func (d *Directory) ack(ctx context.Context, conn *pgx.Conn, version int64) error {
	const q = `UPDATE tenant_directory_members SET seen_version = greatest(seen_version, $2), heartbeat_at = now() WHERE member_id = $1`
	var err error
	if conn != nil {
		_, err = conn.Exec(ctx, q, d.member.id, version)
	} else {
		_, err = d.cfg.Pool.Exec(ctx, q, d.member.id, version)
	}
	if err != nil {
		return fmt.Errorf("acknowledge the barrier: %w", err)
	}
	for {
		cur := d.member.acked.Load()
		if cur >= version || d.member.acked.CompareAndSwap(cur, version) {
			break
		}
	}
	if d.cfg.AckFunc != nil {
		d.cfg.AckFunc(version)
	}
	return nil
}
