package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/projections"
)

// ListOptions selects dead letters.
type ListOptions struct {
	// Projections restricts to these projections or broker-fed consumers
	// (all when empty).
	Projections []string
	// Tenant restricts to one tenant (every tenant of the log when empty).
	Tenant string
	// Stream restricts to one stream.
	Stream string
	// Statuses restricts to these states (default: parked only).
	Statuses []projections.LetterStatus
	// Limit caps the letters returned per tenant (default 100).
	Limit int
}

// DeadLetters lists dead letters, per tenant in ID order.
func (s *Service) DeadLetters(ctx context.Context, o ListOptions) ([]projections.DeadLetter, error) {
	if err := s.checkOwners(ctx, o.Projections); err != nil {
		return nil, err
	}
	for _, st := range o.Statuses {
		if !slices.Contains([]projections.LetterStatus{projections.LetterParked, projections.LetterRetried,
			projections.LetterDiscarded, projections.LetterSuperseded}, st) {
			return nil, fmt.Errorf("%w: status %q: want parked, retried, discarded or superseded", ErrInvalid, st)
		}
	}
	if o.Statuses == nil {
		o.Statuses = []projections.LetterStatus{projections.LetterParked}
	}
	tenants, err := s.tenants(ctx, o.Tenant)
	if err != nil {
		return nil, err
	}
	parts, err := s.partitions(ctx)
	if err != nil {
		return nil, err
	}
	return projections.ReadDeadLetters(ctx, s.cfg.Pool, tenants, projections.LetterFilter{
		Projections: parts.expand(o.Projections), Stream: o.Stream, Statuses: o.Statuses, Limit: o.Limit})
}

// DeadLetter returns one dead letter. With tenant empty every tenant of
// the log is searched (IDs are unique across tenants); with a tenant, a
// letter of another tenant is not found.
func (s *Service) DeadLetter(ctx context.Context, tenant string, id int64) (projections.DeadLetter, error) {
	if id <= 0 {
		return projections.DeadLetter{}, fmt.Errorf("%w: dead letter ID %d: want a positive number from `strata replay dlq list`", ErrInvalid, id)
	}
	tenants, err := s.tenants(ctx, tenant)
	if err != nil {
		return projections.DeadLetter{}, err
	}
	found, err := projections.ReadDeadLetters(ctx, s.cfg.Pool, tenants, projections.LetterFilter{ID: id, Limit: 1})
	if err != nil {
		return projections.DeadLetter{}, err
	}
	if len(found) == 0 {
		return projections.DeadLetter{}, fmt.Errorf("%w: no dead letter %d%s: list them with `strata replay dlq list`", ErrNotFound, id, inTenant(tenant))
	}
	return found[0], nil
}

func inTenant(tenant string) string {
	if tenant == "" {
		return ""
	}
	return " in tenant " + tenant
}

// RetrySpec says which parked streams to retry: the stream of one letter
// (ID), a stream by name (Stream, in Tenant or in every tenant), or every
// parked stream (All); Projections (of projections or broker-fed
// consumers) and Tenant narrow the latter two.
type RetrySpec struct {
	ID          int64
	Stream      string
	All         bool
	Tenant      string
	Projections []string
	// Actor is recorded on the letters applied (e.g. cli:alice@host).
	Actor string
}

// Retried is the outcome of one stream's retry.
type Retried struct {
	Projection string
	projections.RetryOutcome
}

// RetryReport is what a retry did, stream by stream.
type RetryReport struct {
	Streams []Retried
}

// Failed returns the streams that stay parked.
func (r RetryReport) Failed() []Retried {
	var out []Retried
	for _, s := range r.Streams {
		if !s.Unparked {
			out = append(out, s)
		}
	}
	return out
}

// Applied counts the letters applied.
func (r RetryReport) Applied() int {
	n := 0
	for _, s := range r.Streams {
		n += len(s.Applied)
	}
	return n
}

type target struct{ projection, tenant, stream string }

// Retry re-applies parked streams' dead letters in order, each stream in
// one transaction, under the projection's lease (its runner yields
// meanwhile, in whatever process it runs). A stream whose letters all
// apply is unparked; one whose letter fails stays parked at that letter
// and the report says why. Retrying what is not parked changes nothing:
// ErrNothingToDo. A letter cannot be applied before the ones ahead of it
// in its stream, so retrying a letter retries its whole stream.
func (s *Service) Retry(ctx context.Context, spec RetrySpec) (RetryReport, error) {
	var report RetryReport
	if strings.TrimSpace(spec.Actor) == "" {
		return report, fmt.Errorf("%w: retry needs an actor to record", ErrInvalid)
	}
	n := 0
	for _, set := range []bool{spec.ID != 0, spec.Stream != "", spec.All} {
		if set {
			n++
		}
	}
	if n != 1 {
		return report, fmt.Errorf("%w: retry one letter's stream (ID), one stream (--stream) or everything (--all)", ErrInvalid)
	}
	if err := s.checkOwners(ctx, spec.Projections); err != nil {
		return report, err
	}
	// The projections applying the letters: a projection's own, or the
	// one a consumer's row names, under the consumer's name.
	rows, err := s.consumerRows(ctx)
	if err != nil {
		return report, err
	}
	consumers := map[string]projections.Projection{}
	for name, cp := range rows {
		if p, err := s.consumerProjection(name, *cp.Consumer); err == nil {
			consumers[name] = p
		}
	}
	parts, err := s.partitions(ctx)
	if err != nil {
		return report, err
	}
	owner := func(name string) (projections.Projection, bool) {
		if p, ok := s.byName[name]; ok {
			return p, true
		}
		if p, ok := s.byName[parts.projection[name]]; ok {
			return p, true // a partition's letters, retried under its lease
		}
		if _, ok := s.processManager(name); ok {
			return nil, true // retried through the process runtime
		}
		if p, ok := s.relays[name]; ok {
			return p, true // re-published (relay.Republisher)
		}
		p, ok := consumers[name]
		return p, ok
	}
	var targets []target
	if spec.ID != 0 {
		l, err := s.DeadLetter(ctx, spec.Tenant, spec.ID)
		if err != nil {
			return report, err
		}
		if err := s.stillParked(ctx, l); err != nil {
			return report, err
		}
		if _, known := owner(l.Projection); !known {
			if cp, ok := rows[l.Projection]; ok {
				_, err := s.consumerProjection(l.Projection, *cp.Consumer)
				return report, err
			}
			return report, fmt.Errorf("%w: dead letter %d belongs to %s, which this strata does not know: retry it with the program that runs it, or discard it", ErrInvalid, l.ID, l.Projection)
		}
		targets = append(targets, target{l.Projection, l.Tenant, l.Event.Stream})
	} else {
		tenants, err := s.tenants(ctx, spec.Tenant)
		if err != nil {
			return report, err
		}
		parked, err := projections.ReadParkedStreams(ctx, s.cfg.Pool, tenants, parts.expand(spec.Projections)...)
		if err != nil {
			return report, err
		}
		for _, p := range parked {
			if spec.Stream == "" || p.Stream == spec.Stream {
				if _, known := owner(p.Projection); known {
					targets = append(targets, target{p.Projection, p.Tenant, p.Stream})
				}
			}
		}
	}
	if len(targets) == 0 {
		what := "no stream is parked"
		if spec.Stream != "" {
			what = fmt.Sprintf("stream %q is not parked%s", spec.Stream, inTenant(spec.Tenant))
		}
		return report, fmt.Errorf("%w: %s", ErrNothingToDo, what)
	}
	// One lease per projection, held while its streams are retried. A
	// consumer's is taken the same way: the consumer probes its pause lock
	// in every message's transaction and nacks its messages meanwhile; so
	// is a relay's, whose batches probe it too and wait.
	names := append(append(parts.expand(s.Names()), s.ProcessNames()...), slices.Sorted(maps.Keys(consumers))...)
	for _, name := range append(names, slices.Sorted(maps.Keys(s.relays))...) {
		var mine []target
		for _, t := range targets {
			if t.projection == name {
				mine = append(mine, t)
			}
		}
		if len(mine) == 0 {
			continue
		}
		p, _ := owner(name)
		x, err := s.exclusive(ctx, name)
		if err != nil {
			return report, err
		}
		m, isProcess := s.processManager(name)
		for _, t := range mine {
			var out projections.RetryOutcome
			var err error
			if isProcess {
				out, err = s.retryInstance(ctx, x, m, t.tenant, t.stream, spec.Actor)
			} else {
				out, err = projections.RetryStream(ctx, x, p, s.cfg.Registry, t.tenant, t.stream, spec.Actor)
			}
			if errors.Is(err, projections.ErrNotParked) {
				continue // unparked meanwhile (by its runner's own retry)
			}
			if err != nil {
				x.Release()
				return report, fmt.Errorf("retry stream %s of tenant %s for %s (nothing of it changed; retry again): %w", t.stream, t.tenant, name, err)
			}
			report.Streams = append(report.Streams, Retried{Projection: name, RetryOutcome: out})
		}
		x.Release()
	}
	if len(report.Streams) == 0 {
		return report, fmt.Errorf("%w: the streams were unparked meanwhile", ErrNothingToDo)
	}
	return report, nil
}

// stillParked checks that a letter is one a retry or discard can act on.
func (s *Service) stillParked(ctx context.Context, l projections.DeadLetter) error {
	if l.Status != projections.LetterParked {
		return fmt.Errorf("%w: dead letter %d is %s already (at %s by %s)", ErrNothingToDo, l.ID, l.Status,
			l.ResolvedAt.UTC().Format("2006-01-02 15:04:05Z"), l.ResolvedBy)
	}
	cps, err := s.checkpoints(ctx, l.Projection)
	if err != nil {
		return err
	}
	if cps[l.Projection].Generation != l.Generation {
		return fmt.Errorf("%w: dead letter %d belongs to rows of %s that a rebuild replaced; the rebuild applied the event again", ErrNothingToDo, l.ID, l.Projection)
	}
	return nil
}

// Discard marks a parked dead letter discarded, recording actor and
// reason; nothing is applied. If it was the last parked letter of its
// stream the stream is unparked; otherwise the letters behind it wait for
// a retry (`dlq retry`), and automatic retries of the stream stop.
func (s *Service) Discard(ctx context.Context, tenant string, id int64, actor, reason string) (projections.DeadLetter, error) {
	if strings.TrimSpace(reason) == "" {
		return projections.DeadLetter{}, fmt.Errorf("%w: a discard needs a reason (--reason TEXT): it is recorded with the letter", ErrInvalid)
	}
	if strings.TrimSpace(actor) == "" {
		return projections.DeadLetter{}, fmt.Errorf("%w: a discard needs an actor to record", ErrInvalid)
	}
	l, err := s.DeadLetter(ctx, tenant, id)
	if err != nil {
		return l, err
	}
	if err := s.stillParked(ctx, l); err != nil {
		return l, err
	}
	x, err := s.exclusive(ctx, l.Projection)
	if err != nil {
		return l, err
	}
	defer x.Release()
	if m, ok := s.processManager(l.Projection); ok {
		// A process's parked instance is discarded whole: the letter and
		// those behind it, and its parked steps.
		if _, err := process.DiscardInstance(ctx, x, m, l.Tenant, l.Event.Stream, actor, reason); err != nil {
			return l, err
		}
		return s.DeadLetter(ctx, l.Tenant, id)
	}
	out, err := projections.DiscardDeadLetter(ctx, x, l.Tenant, id, actor, reason)
	switch {
	case errors.Is(err, projections.ErrLetterResolved):
		return out, fmt.Errorf("%w: dead letter %d was resolved meanwhile", ErrNothingToDo, id)
	case errors.Is(err, projections.ErrLetterNotFound):
		return out, fmt.Errorf("%w: dead letter %d", ErrNotFound, id)
	}
	return out, err
}

// partitionKeys maps partitioned projections onto the checkpoint keys of
// their partitions, under which their dead letters and parked streams are
// kept, and back.
type partitionKeys struct {
	keys       map[string][]string // projection -> its partitions' keys, sorted
	projection map[string]string   // partition key -> projection
}

// partitions reads the partitions' checkpoint rows (of every layout: a
// split row's letters stay under its key).
func (s *Service) partitions(ctx context.Context) (partitionKeys, error) {
	cps, err := s.checkpoints(ctx)
	if err != nil {
		return partitionKeys{}, err
	}
	pk := partitionKeys{keys: map[string][]string{}, projection: map[string]string{}}
	for key, cp := range cps {
		if cp.Partition != nil {
			pk.keys[cp.Partition.Projection] = append(pk.keys[cp.Partition.Projection], key)
			pk.projection[key] = cp.Partition.Projection
		}
	}
	for _, keys := range pk.keys {
		slices.Sort(keys)
	}
	return pk, nil
}

// expand returns names with each partitioned projection's partition keys
// after it (nil stays nil: every projection).
func (pk partitionKeys) expand(names []string) []string {
	if names == nil {
		return nil
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, n)
		out = append(out, pk.keys[n]...)
	}
	return out
}
