package eventstore

import (
	"context"

	"github.com/strata-es/strata/domain/event"
)

// Snapshots (issue 31 §4): an aggregate's state kept beside its stream, so
// that loading a long stream reads the snapshot and the events after it.
// A snapshot is a cache of the log: a store may lose one at any time, and
// a reader rebuilds the state from the events.

// Snapshot is a state of a stream's aggregate, encoded by its module.
type Snapshot struct {
	// Schema names what Data was encoded with; a read asks for one schema
	// and a snapshot of another is not returned.
	Schema string
	// Version is the stream version the state has applied, Position that
	// event's place in the log.
	Version  int64
	Position event.Position
	Data     []byte
}

// SnapshotStore is a Store that keeps snapshots.
type SnapshotStore interface {
	// ReadSnapshotted returns the stream's snapshot of schema, if it has
	// one (found), and the stream's events after it (after version 0
	// without one), in one read.
	ReadSnapshotted(ctx context.Context, tenant, stream, schema string) (snap Snapshot, found bool, tail []event.Record, err error)
	// SaveSnapshot keeps snap as the stream's snapshot unless the stream
	// has one of the same schema at a later version.
	SaveSnapshot(ctx context.Context, tenant, stream string, snap Snapshot) error
}
