package commands

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

// Snapshots makes an aggregate type keep its state beside its stream
// (issue 31 §4), opt-in: a command on a long stream then reads the
// snapshot and the events after it instead of the whole stream. A
// snapshot is only a cache of the log: one that is missing, of another
// Version, taken under other codecs or upcasters (the registry's
// fingerprint), or whose data subject was forgotten is ignored, and the
// state rebuilt from the events (and snapshotted again).
//
// An aggregate with snapshots does not use the handler's history cache:
// its load is one round trip whatever the stream's length.
type Snapshots[A any] struct {
	// Version of the encoding: change it whenever Encode's output, or what
	// Decode makes of it, changes.
	Version int
	// Every: a snapshot is taken by the command that takes the stream this
	// many events past the last one (default 100).
	Every int64
	// EveryBytes, when positive, also takes one when the events past the
	// last snapshot hold this many bytes of data (as stored, sealed
	// fields included): for a stream whose events are few but large, so
	// that a load reads at most about this much whatever they count.
	EveryBytes int64
	// Encode and Decode turn a state into bytes and back.
	Encode func(A) ([]byte, error)
	Decode func([]byte) (A, error)
	// Resume applies the payloads of the events after a state to it, as
	// Load applies a whole history to the empty state.
	Resume func(state A, tail []event.Payload) (A, error)
}

func (s *Snapshots[A]) validate() error {
	if s == nil {
		return nil
	}
	if s.Version < 1 || s.Every < 0 || s.EveryBytes < 0 || s.Encode == nil || s.Decode == nil || s.Resume == nil {
		return errors.New("aggregate: Snapshots needs Version >= 1, Every >= 0, EveryBytes >= 0, Encode, Decode and Resume")
	}
	return nil
}

func (s *Snapshots[A]) every() int64 {
	if s.Every == 0 {
		return 100
	}
	return s.Every
}

// snapshotAt is what a load learnt of the stream's snapshot.
type snapshotAt struct {
	version  int64
	position event.Position
	keyID    string // the key that sealed it: the stream's subject's
}

// snapshotSchema names a snapshot's encoding: the aggregate's, its
// Version, and the codecs it was decoded with.
func (h *Handler[A]) snapshotSchema() string {
	return fmt.Sprintf("%s/v%d/%s", h.agg.Kind, h.agg.Snapshots.Version, h.cfg.Registry.Fingerprint())
}

// loadSnapshotted rebuilds the aggregate from its snapshot and the events
// after it, or from its whole stream when the snapshot cannot be used.
// The records returned are those after the state's snapshot.
func (h *Handler[A]) loadSnapshotted(ctx context.Context, tenant domain.TenantID, stream string) (A, []event.Record, snapshotAt, error) {
	var zero A
	schema := h.snapshotSchema()
	snap, found, tail, err := h.snaps.ReadSnapshotted(ctx, string(tenant), stream, schema)
	if err != nil {
		return zero, nil, snapshotAt{}, fmt.Errorf("load %s: %w", stream, err)
	}
	if found {
		state, at, err := h.resume(ctx, tenant, stream, snap, tail)
		if err == nil {
			return state, tail, at, nil
		}
		// Forgotten subject, another encoding, a bug in Decode: the log
		// decides.
		if tail, err = h.store.ReadStream(ctx, string(tenant), stream, 0); err != nil {
			return zero, nil, snapshotAt{}, fmt.Errorf("load %s: %w", stream, err)
		}
	}
	payloads, err := h.decodeAll(stream, tail)
	if err != nil {
		return zero, nil, snapshotAt{}, err
	}
	state, err := h.agg.Load(payloads)
	if err != nil {
		return zero, nil, snapshotAt{}, fmt.Errorf("load %s: %w", stream, err)
	}
	return state, tail, snapshotAt{}, nil
}

func (h *Handler[A]) resume(ctx context.Context, tenant domain.TenantID, stream string, snap eventstore.Snapshot, tail []event.Record) (A, snapshotAt, error) {
	var zero A
	data, keyID, err := h.cfg.Registry.OpenState(ctx, string(tenant), stream, snap.Data)
	if err != nil {
		return zero, snapshotAt{}, err
	}
	state, err := h.agg.Snapshots.Decode(data)
	if err != nil {
		return zero, snapshotAt{}, err
	}
	payloads, err := h.decodeAll(stream, tail)
	if err != nil {
		return zero, snapshotAt{}, err
	}
	if state, err = h.agg.Snapshots.Resume(state, payloads); err != nil {
		return zero, snapshotAt{}, err
	}
	if h.agg.Version(state) != snap.Version+int64(len(tail)) {
		return zero, snapshotAt{}, fmt.Errorf("snapshot of %s at version %d with %d events after it gives version %d", stream, snap.Version, len(tail), h.agg.Version(state))
	}
	return state, snapshotAt{version: snap.Version, position: snap.Position, keyID: keyID}, nil
}

func (h *Handler[A]) decodeAll(stream string, recs []event.Record) ([]event.Payload, error) {
	payloads := make([]event.Payload, len(recs))
	for i, rec := range recs {
		var err error
		if payloads[i], err = h.cfg.Registry.DecodeRecord(rec); err != nil {
			return nil, fmt.Errorf("load %s: %w", stream, err)
		}
	}
	return payloads, nil
}

// due reports whether a snapshot is due at version, the events after the
// last one (at version since) holding size bytes of data.
func (s *Snapshots[A]) due(version, since, size int64) bool {
	return version-since >= s.every() || (s.EveryBytes > 0 && size >= s.EveryBytes)
}

// tailBytes is the data the events after a snapshot hold: those the load
// read after it and those the command appends.
func tailBytes(read []event.Record, appended []eventstore.NewEvent) int64 {
	var n int64
	for _, r := range read {
		n += int64(len(r.Data))
	}
	for _, e := range appended {
		n += int64(len(e.Data))
	}
	return n
}

// snapshotAfter takes a snapshot of the state a command's events made, when
// they took the stream Every events (or EveryBytes of data) past the last
// snapshot. It is a cache: a failure leaves the stream without a newer one
// and the command's outcome unchanged.
func (h *Handler[A]) snapshotAfter(ctx context.Context, tenant domain.TenantID, stream string, state A, decided []event.Payload, ar eventstore.AppendResult, at snapshotAt, size int64, streamKey func() (string, error)) {
	if h.snaps == nil || !h.agg.Snapshots.due(ar.LastVersion, at.version, size) {
		return
	}
	next, err := h.agg.Snapshots.Resume(state, decided)
	if err != nil || h.agg.Version(next) != ar.LastVersion {
		return
	}
	data, err := h.agg.Snapshots.Encode(next)
	if err != nil {
		return
	}
	keyID, err := streamKey()
	if err != nil {
		return
	}
	if data, err = h.cfg.Registry.SealState(ctx, string(tenant), stream, keyID, data); err != nil {
		return
	}
	_ = h.snaps.SaveSnapshot(ctx, string(tenant), stream, eventstore.Snapshot{
		Schema: h.snapshotSchema(), Version: ar.LastVersion, Position: ar.Position, Data: data})
}
