package eventstore

import (
	"context"
	"crypto/md5" //nolint:gosec // a spread of streams over buckets, not a secret
	"fmt"

	"github.com/strata-es/strata/domain/event"
)

// Buckets is how many buckets the log's streams are spread over; a
// partitioned projection has at most this many partitions.
const Buckets = 16

// BucketOf returns the bucket of a stream: the low four bits of the first
// byte of md5(tenant + "/" + stream). PostgreSQL computes the same into
// events.bucket (migration 018, stream_bucket), which the log's index by
// partition leads with.
func BucketOf(tenant, stream string) int {
	sum := md5.Sum([]byte(tenant + "/" + stream)) //nolint:gosec // see the import
	return int(sum[0] & (Buckets - 1))
}

// Partition is one part of the log split by stream: partition Index of
// Count holds the streams whose bucket b has b % Count == Index. Count is
// a power of two from 2 to Buckets, so a stream stays in one partition and
// doubling Count splits every partition in two.
type Partition struct {
	Index, Count int
}

// Validate reports a partition that is not one.
func (p Partition) Validate() error {
	if p.Count < 2 || p.Count > Buckets || p.Count&(p.Count-1) != 0 {
		return fmt.Errorf("partitions %d: want a power of two from 2 to %d", p.Count, Buckets)
	}
	if p.Index < 0 || p.Index >= p.Count {
		return fmt.Errorf("partition %d of %d: want 0 to %d", p.Index, p.Count, p.Count-1)
	}
	return nil
}

// IsZero reports the whole log (no partition).
func (p Partition) IsZero() bool { return p.Count == 0 }

// Holds reports whether the stream's events are in the partition.
func (p Partition) Holds(tenant, stream string) bool {
	return BucketOf(tenant, stream)%p.Count == p.Index
}

// Buckets returns the partition's buckets in increasing order.
func (p Partition) Buckets() []int {
	var out []int
	for b := p.Index; b < Buckets; b += p.Count {
		out = append(out, b)
	}
	return out
}

func (p Partition) String() string { return fmt.Sprintf("%d/%d", p.Index, p.Count) }

// PartitionLog is implemented by logs that can read one partition's events
// in log order without reading the others' (PostgreSQL, through the index
// of the log by bucket). Partitioned projections need it.
type PartitionLog interface {
	// ReadPartition returns up to limit events of the partition after the
	// given position in log order, with ReadAll's guarantee: an event not
	// returned now is never positioned at or before the last returned one.
	ReadPartition(ctx context.Context, p Partition, after event.Position, limit int) ([]event.Record, error)
}
