package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/projections"
)

// Process managers (ARCHITECTURE decision 10) park instances in the same
// dead-letter store as projections park streams, under the process's name;
// the service retries and discards them through the process runtime, and
// shows their instances to operators.

// ProcessNames returns the names of the process managers the service
// knows (Config.Processes), in order.
func (s *Service) ProcessNames() []string {
	out := make([]string, 0, len(s.cfg.Processes))
	for _, m := range s.cfg.Processes {
		out = append(out, m.Name())
	}
	return out
}

func (s *Service) processManager(name string) (process.Manager, bool) {
	for _, m := range s.cfg.Processes {
		if m.Name() == name {
			return m, true
		}
	}
	return nil, false
}

// InstanceOptions select process instances: of one tenant, or of every
// tenant when Tenant is empty.
type InstanceOptions struct {
	Tenant string
	process.InstanceFilter
}

// Instances lists process instances (per tenant, in process and instance
// order).
func (s *Service) Instances(ctx context.Context, o InstanceOptions) ([]process.Instance, error) {
	if o.Process != "" {
		if _, ok := s.processManager(o.Process); !ok {
			return nil, fmt.Errorf("%w: unknown process %q (known: %v)", ErrInvalid, o.Process, s.ProcessNames())
		}
	}
	if o.Limit < 0 || o.Limit > 1000 {
		return nil, fmt.Errorf("%w: limit must be from 1 to 1000", ErrInvalid)
	}
	tenants, err := s.tenants(ctx, o.Tenant)
	if err != nil {
		return nil, err
	}
	return process.ListInstances(ctx, s.cfg.Pool, tenants, o.InstanceFilter)
}

// Instance returns one instance of a tenant with its state, history,
// steps and deadlines. Another tenant's instance is ErrNotFound, exactly
// like a missing one.
func (s *Service) Instance(ctx context.Context, tenant, name, instance string) (process.InstanceDetail, error) {
	if _, ok := s.processManager(name); !ok {
		return process.InstanceDetail{}, fmt.Errorf("%w: unknown process %q (known: %v)", ErrInvalid, name, s.ProcessNames())
	}
	if err := checkTenant(tenant); err != nil {
		return process.InstanceDetail{}, err
	}
	d, err := process.ReadInstance(ctx, s.cfg.Pool, tenant, name, instance)
	if errors.Is(err, process.ErrInstanceNotFound) {
		return d, fmt.Errorf("%w: process %s has no instance %q%s", ErrNotFound, name, instance, inTenant(tenant))
	}
	return d, err
}

// retryInstance retries a process's parked instance (the stream's parked
// inputs decided again, its parked steps re-queued) under the process's
// lease, reported like a projection's stream.
func (s *Service) retryInstance(ctx context.Context, x *projections.Exclusive, m process.Manager, tenant, stream, actor string) (projections.RetryOutcome, error) {
	out, err := process.RetryInstance(ctx, x, m, s.cfg.Registry, tenant, stream, actor)
	if err != nil {
		return projections.RetryOutcome{}, err
	}
	r := projections.RetryOutcome{Tenant: out.Tenant, Stream: out.Stream, Applied: out.Decided, Unparked: out.Unparked}
	if out.FailedLetter != 0 {
		l, lerr := s.DeadLetter(ctx, tenant, out.FailedLetter)
		if lerr != nil {
			l = projections.DeadLetter{ID: out.FailedLetter, Tenant: tenant, Projection: m.Name(), Error: out.Error}
		}
		r.Failed = &l
	}
	return r, nil
}
