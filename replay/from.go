package replay

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections"
)

// fromChunk is how many streams --from re-derives per transaction.
const fromChunk = 200

// rebuildFrom re-derives, for each projection, every stream that has an
// event after o.From (up to the projection's live checkpoint), from the
// stream's first event, in place. It is what "rebuild from a position"
// means for strata: the rows a bug may have damaged since a deploy are the
// rows of the streams that had events since then; re-deriving each of them
// whole (delete its rows, apply all its events again) is exact, whereas
// re-applying only the later events on top of the existing rows would
// count them twice. It is therefore only offered for projections whose
// rows each belong to one stream (projections.StreamScoped); Rebuild
// refuses the others.
//
// It runs under the projection's lease (the live runner waits), at the
// live checkpoint, one transaction per chunk of streams of one tenant: a
// query sees each order either as it was or re-derived, never half of it.
// Parked streams are left alone (their rows stop at the parked event on
// purpose). Running it twice gives the same rows. A failure stops it;
// chunks done stay done, and running it again finishes the job.
func (s *Service) rebuildFrom(ctx context.Context, ps []projections.Projection, o RebuildOptions) (Result, error) {
	began := time.Now()
	tr := newTracker(o.Progress, o.ProgressEvery)
	var res Result
	for _, p := range ps {
		r, err := s.fromOne(ctx, p, o, tr)
		if err != nil {
			res.Elapsed = time.Since(began)
			return res, fmt.Errorf("rebuild %s from %s (chunks committed so far are re-derived; run the same command again to finish): %w", p.Name(), o.From.Token(), err)
		}
		res.Projections = append(res.Projections, r)
		res.Events = max(res.Events, r.Events)
	}
	tr.finish()
	res.Elapsed = time.Since(began)
	return res, nil
}

func (s *Service) fromOne(ctx context.Context, p projections.Projection, o RebuildOptions, tr *tracker) (Rebuilt, error) {
	began := time.Now()
	res := Rebuilt{Name: p.Name(), Scope: "from"}
	sp := p.(projections.StreamScoped)
	x, err := s.exclusive(ctx, p.Name())
	if err != nil {
		return res, err
	}
	defer x.Release()
	cps, err := s.checkpoints(ctx, p.Name())
	if err != nil {
		return res, err
	}
	at := cps[p.Name()].Position
	res.Checkpoint = at
	touched, err := s.touchedStreams(ctx, *o.From, at, o.Tenant, p.EventTypes())
	if err != nil {
		return res, err
	}
	tenants := sortedKeys(touched)
	parked, err := projections.ReadParkedStreams(ctx, s.cfg.Pool, tenants, p.Name())
	if err != nil {
		return res, err
	}
	for _, ps := range parked {
		if i := slices.Index(touched[ps.Tenant], ps.Stream); i >= 0 {
			touched[ps.Tenant] = slices.Delete(touched[ps.Tenant], i, i+1)
			res.Notes = append(res.Notes, fmt.Sprintf("stream %s of tenant %s is parked and was left alone: retry or discard its dead letters first", ps.Stream, ps.Tenant))
		}
	}
	var total int64
	for _, ss := range touched {
		total += int64(len(ss))
	}
	tr.start(p.Name(), total)
	tr.phase(PhaseStreams, p.Name())
	handles := map[string]bool{}
	for _, t := range p.EventTypes() {
		handles[t] = true
	}
	for _, tenant := range tenants {
		streams := touched[tenant]
		for lo := 0; lo < len(streams); lo += fromChunk {
			chunk := streams[lo:min(lo+fromChunk, len(streams))]
			recs, err := s.streamEvents(ctx, tenant, chunk, at)
			if err != nil {
				return res, err
			}
			evs := make([]projections.Event, 0, len(recs))
			for _, rec := range recs {
				if !handles[rec.Type] {
					continue
				}
				payload, err := s.cfg.Registry.DecodeRecord(rec)
				if err != nil {
					return res, &projections.EventError{Projection: p.Name(), Event: rec, Err: fmt.Errorf("decode: %w", err)}
				}
				evs = append(evs, projections.Event{Record: rec, Payload: payload})
			}
			bp, setBased := p.(projections.BatchProjection)
			err = s.rederive(ctx, x.Conn(), sp, bp, setBased, tenant, chunk, evs)
			if err != nil && setBased {
				// Name the event: the same chunk again, event by event.
				err = s.rederive(ctx, x.Conn(), sp, nil, false, tenant, chunk, evs)
			}
			if err != nil {
				return res, err
			}
			res.Streams += int64(len(chunk))
			res.Events += int64(len(recs))
			tr.advance(p.Name(), int64(len(chunk)))
		}
	}
	res.Elapsed = time.Since(began)
	tr.done(p.Name())
	return res, nil
}

// rederive deletes the rows of streams and applies evs (all their events,
// in log order) in one transaction.
func (s *Service) rederive(ctx context.Context, conn *pgx.Conn, p projections.StreamScoped, bp projections.BatchProjection, setBased bool,
	tenant string, streams []string, evs []projections.Event) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(db.SetTenantSQL, tenant)
	if err := p.DeleteStreams(b, tenant, streams); err != nil {
		return err
	}
	first := b.Len()
	owner := map[int]int{} // queued statement -> event index (per-event path)
	switch {
	case len(evs) == 0:
	case setBased:
		if err := projections.ApplyEvents(bp, b, evs); err != nil {
			return err
		}
	default:
		for i, ev := range evs {
			n := b.Len()
			if err := projections.ApplyEvent(p, b, ev); err != nil {
				return &projections.EventError{Projection: p.Name(), Index: i, Event: ev.Record, Err: err}
			}
			for k := n; k < b.Len(); k++ {
				owner[k] = i
			}
		}
	}
	projections.GuardCallbacks(b)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	for k, qq := range b.QueuedQueries {
		var err error
		if qq.Fn != nil {
			err = qq.Fn(br)
		} else {
			_, err = br.Exec()
		}
		if err != nil {
			br.Close()
			if i, ok := owner[k]; ok && k >= first {
				return &projections.EventError{Projection: p.Name(), Index: i, Event: evs[i].Record, Err: err}
			}
			return fmt.Errorf("re-derive %d streams of tenant %s: %w", len(streams), tenant, err)
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	committed = true
	return nil
}

// touchedStreams returns, per tenant, the streams with an event of the
// given types after from and at or before until. It reads the global log
// through the store port, so it works on every store (PostgreSQL,
// EventStoreDB): only the events since from, which is what --from is for.
func (s *Service) touchedStreams(ctx context.Context, from, until event.Position, tenant string, types []string) (map[string][]string, error) {
	out := map[string][]string{}
	if !from.Less(until) {
		return out, nil
	}
	handles := map[string]bool{}
	for _, t := range types {
		handles[t] = true
	}
	seen := map[[2]string]bool{}
	for after := from; ; {
		recs, err := s.cfg.Log.ReadAll(ctx, after, fromPage)
		if err != nil {
			return nil, fmt.Errorf("find the streams touched since %s: %w", from.Token(), err)
		}
		for _, rec := range recs {
			if until.Less(rec.Position) {
				return sortStreams(out), nil
			}
			k := [2]string{rec.Tenant, rec.Stream}
			if handles[rec.Type] && (tenant == "" || rec.Tenant == tenant) && !seen[k] {
				seen[k] = true
				out[rec.Tenant] = append(out[rec.Tenant], rec.Stream)
			}
		}
		// A store may return fewer events than asked for (EventStoreDB
		// pages its reads); only an empty read is the end. Every event at
		// or before until is committed (until is a checkpoint), so none
		// can be missing from the reads.
		if len(recs) == 0 {
			return sortStreams(out), nil
		}
		after = recs[len(recs)-1].Position
	}
}

// fromPage is how many events of the global log one read of
// touchedStreams takes.
const fromPage = 5000

func sortStreams(m map[string][]string) map[string][]string {
	for _, ss := range m {
		slices.Sort(ss)
	}
	return m
}

// streamEvents reads every event of some streams of a tenant at or before
// until, in log order, through the store port (each stream whole, its
// events' positions as the global log gives them: the conformance suite
// holds every store to that).
func (s *Service) streamEvents(ctx context.Context, tenant string, streams []string, until event.Position) ([]event.Record, error) {
	var out []event.Record
	for _, stream := range streams {
		recs, err := s.cfg.Log.ReadStream(ctx, tenant, stream, 0)
		if err != nil {
			return nil, fmt.Errorf("read stream %s of tenant %s: %w", stream, tenant, err)
		}
		for _, rec := range recs {
			if !until.Less(rec.Position) {
				out = append(out, rec)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b event.Record) int { return a.Position.Compare(b.Position) })
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
