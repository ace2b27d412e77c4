package replay

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/strata-es/strata/projections"
)

// Broker-fed consumers (relay.Consumer) park into the same dead-letter
// store as projection runners, under their consumer names, each with a
// checkpoint row that says what it applies (projections.ConsumerInfo). The
// dead-letter operations accept a consumer's name wherever they accept a
// projection's: its letters are listed, retried and discarded under the
// consumer's lease and pause lock, which the consumer probes in every
// message's transaction (it nacks its messages while a tool holds it).

// ConsumerStatus is a broker-fed consumer as the dead-letter store sees it.
type ConsumerStatus struct {
	Name string
	projections.ConsumerInfo
	// ParkedStreams and ParkedLetters count, over every tenant, the
	// consumer's streams parked now and its dead letters still parked.
	ParkedStreams, ParkedLetters int64
	// Retryable: this tool knows the projection (and its letters can be
	// retried); otherwise they can only be listed and discarded.
	Retryable bool
}

// Consumers lists the broker-fed consumers that have a checkpoint row, by
// name.
func (s *Service) Consumers(ctx context.Context) ([]ConsumerStatus, error) {
	rows, err := s.consumerRows(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ConsumerStatus, 0, len(rows))
	for _, name := range slices.Sorted(maps.Keys(rows)) {
		cp := rows[name]
		_, rerr := s.consumerProjection(name, *cp.Consumer)
		out = append(out, ConsumerStatus{Name: name, ConsumerInfo: *cp.Consumer, ParkedStreams: cp.ParkedStreams,
			ParkedLetters: cp.ParkedLetters, Retryable: rerr == nil})
	}
	return out, nil
}

// consumerRows reads the checkpoint rows of consumers, by name.
func (s *Service) consumerRows(ctx context.Context) (map[string]projections.Checkpoint, error) {
	all, err := s.checkpoints(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]projections.Checkpoint{}
	for name, cp := range all {
		if cp.Consumer != nil {
			if _, projection := s.byName[name]; !projection {
				out[name] = cp
			}
		}
	}
	return out, nil
}

// consumerProjection returns what retries the letters of the consumer
// name, which applies info.
func (s *Service) consumerProjection(name string, info projections.ConsumerInfo) (projections.Projection, error) {
	if s.cfg.ConsumerProjection == nil {
		return nil, fmt.Errorf("%w: %s is a broker-fed consumer, whose letters this tool cannot retry (only list and discard)", ErrInvalid, name)
	}
	base, ok := s.byName[info.Projection]
	if !ok {
		return nil, fmt.Errorf("%w: consumer %s applies projection %q, which this strata does not know (it knows %s): retry its letters with the program that runs it, or discard them",
			ErrInvalid, name, info.Projection, strings.Join(s.Names(), ", "))
	}
	p := base
	if !slices.Equal(base.Tables(), info.Tables) {
		rt, ok := base.(projections.Retargetable)
		if !ok || len(base.Tables()) != len(info.Tables) {
			return nil, fmt.Errorf("%w: consumer %s applies %s into tables %s, which this strata cannot write with it",
				ErrInvalid, name, info.Projection, strings.Join(info.Tables, ", "))
		}
		rename := map[string]string{}
		for i, t := range base.Tables() {
			rename[t] = info.Tables[i]
		}
		if p = rt.WithTables(rename); !slices.Equal(p.Tables(), info.Tables) {
			return nil, fmt.Errorf("%w: consumer %s applies %s into tables %s, which this strata cannot write with it",
				ErrInvalid, name, info.Projection, strings.Join(info.Tables, ", "))
		}
	}
	return s.cfg.ConsumerProjection(name, p), nil
}

// checkOwners checks names of projections or consumers whose dead letters are
// asked for.
func (s *Service) checkOwners(ctx context.Context, names []string) error {
	var rows map[string]projections.Checkpoint
	for _, n := range names {
		if _, ok := s.byName[n]; ok {
			continue
		}
		if _, ok := s.processManager(n); ok {
			continue
		}
		if _, ok := s.relays[n]; ok {
			continue
		}
		if rows == nil {
			var err error
			if rows, err = s.consumerRows(ctx); err != nil {
				return err
			}
		}
		if _, ok := rows[n]; !ok {
			parts, err := s.partitions(ctx)
			if err != nil {
				return err
			}
			if _, ok := parts.projection[n]; ok {
				continue // a partition of a projection
			}
			known := append(s.Names(), slices.Sorted(maps.Keys(rows))...)
			return fmt.Errorf("%w: unknown projection or consumer %q: want one of %s", ErrInvalid, n, strings.Join(known, ", "))
		}
	}
	return nil
}
