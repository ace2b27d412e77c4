package pgsession

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The lease families of the workers that read the global log from a
// checkpoint (a projection_checkpoints row, keyed by its name) and write or
// publish tenants' data: the workers a tenant's erasure must wait for while
// they hold the tenant's events (ARCHITECTURE decision 13). They are here,
// not beside each worker, because the erasure must know every one of them:
// it once judged liveness by the projections' family alone and went past
// a relay that still held the tenant's events in memory, which it then
// published to the broker and counted in projection_ledger after the
// erasure (issue 29).
const (
	// ProjectionLeaseClass ("STRP"): projection runners, rebuilds (their
	// <name>__rebuild checkpoints) and process managers.
	ProjectionLeaseClass int32 = 0x53545250
	// RelayLeaseClass ("STRL"): the relay, keyed by relay_<topic>.
	RelayLeaseClass int32 = 0x5354524C
)

var (
	// ProjectionLease is the family of ProjectionLeaseClass.
	ProjectionLease = Lease{Class: ProjectionLeaseClass, Namespace: "strata-projection"}
	// RelayLease is the family of RelayLeaseClass.
	RelayLease = Lease{Class: RelayLeaseClass, Namespace: "strata-relay"}
)

// RunnerLeases are every family in which a worker holds the lease of a
// checkpoint. A new kind of worker that keeps a checkpoint takes its
// lease in one of these families, or adds its own here.
var RunnerLeases = []Lease{ProjectionLease, RelayLease}

// CheckpointLive reports whether some session, of any role, in the
// current database holds the lease of checkpoint name in any family of
// RunnerLeases: a worker runs it (or a tool holds it, as a rebuild's swap
// does). pg_locks is readable by every role.
func CheckpointLive(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string) (bool, error) {
	classes := make([]int64, len(RunnerLeases))
	keys := make([]int64, len(RunnerLeases))
	for i, l := range RunnerLeases {
		// pg_locks shows both keys of the two-key form as oids: the int4's
		// bits read unsigned.
		classes[i], keys[i] = int64(uint32(l.Class)), int64(uint32(l.Key(name)))
	}
	var live bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l
JOIN unnest($1::bigint[], $2::bigint[]) AS f(class, key) ON l.classid::bigint = f.class AND l.objid::bigint = f.key
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.mode = 'ExclusiveLock'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, classes, keys).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("read the leases of %s: %w", name, err)
	}
	return live, nil
}
