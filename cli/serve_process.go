package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/telemetry"
)

// wireProcesses runs every module's process managers in the projector
// role (ARCHITECTURE decision 10): one runner per process, one active
// across processes under its lease. Their commands go through the same
// store, idempotency records and command middleware as the command API's.
func wireProcesses(a *app) error {
	specs, err := a.processSpecs()
	if err != nil {
		return err
	}
	if specs, err = selectProcesses(specs, a.env.str("STRATA_PROCESSES", "all")); err != nil {
		return err
	}
	a.processes = specs
	if len(specs) == 0 {
		return nil
	}
	poll, err := a.env.duration("STRATA_PROCESS_POLL", time.Second)
	if err != nil {
		return err
	}
	attempts, err := a.env.integer("STRATA_PROCESS_ATTEMPTS", 5)
	if err != nil {
		return err
	}
	if attempts < 1 {
		return fmt.Errorf("STRATA_PROCESS_ATTEMPTS=%d: want at least 1", attempts)
	}
	pm := a.metrics.NewProcessMetrics()
	wake := a.projectionWake()
	var runners []*process.Runner
	for _, spec := range specs {
		r, err := process.NewRunner(spec, a.log, a.projPool, process.RunnerConfig{
			Registry: a.registry,
			Logger:   a.logger,
			Wake:     wake,
			Poll:     poll,
			Attempts: attempts,
			OnStep: func(s process.StepReport) {
				pm.Steps.WithLabelValues(s.Process, string(s.Kind), s.Name, string(s.Outcome)).Inc()
				pm.StepDuration.WithLabelValues(s.Process, string(s.Kind), s.Name).Observe(s.Duration.Seconds())
			},
			OnFire: func(f process.FireReport) {
				pm.DeadlineLag.WithLabelValues(f.Process).Observe(max(f.Lag, 0).Seconds())
			},
		})
		if err != nil {
			return fmt.Errorf("process %s: %w", spec.Manager.Name(), err)
		}
		runners = append(runners, r)
		a.workers = append(a.workers, worker{name: "process " + spec.Manager.Name(), run: r.Run})
	}
	a.metrics.RegisterProcesses(func(ctx context.Context) ([]telemetry.ProcessStat, error) {
		return processStats(ctx, a, specs)
	})
	a.readiness = append(a.readiness, readinessCheck{"processes", func(ctx context.Context) error {
		var waiting []string
		for _, r := range runners {
			if s := r.Status().State; s == process.StateStarting || s == process.StateStopped {
				waiting = append(waiting, r.Name()+" "+string(s))
			}
		}
		if len(waiting) > 0 {
			return errors.New("process runners not connected: " + strings.Join(waiting, ", "))
		}
		return nil
	}})
	return nil
}

// processSpecs makes the modules' process managers once per serve process:
// their commands go through the command side's store, idempotency records
// and telemetry middleware.
func (a *app) processSpecs() ([]process.Spec, error) {
	if a.specsMade {
		return a.allSpecs, nil
	}
	specs, err := a.mods.Processes(commandapi.Deps{
		Store:       telemetry.InstrumentStore(a.events, a.metrics),
		Idempotency: a.store,
		Config:      commands.Config{Registry: a.registry, Middleware: []commands.Middleware{telemetry.CommandMiddleware(a.metrics)}},
	}, a.env.get)
	if err != nil {
		return nil, err
	}
	a.allSpecs, a.specsMade = specs, true
	return specs, nil
}

// processManagers returns every module's process managers (the admin API
// and replay tooling show and retry them whether or not this process runs
// them).
func (a *app) processManagers() ([]process.Manager, error) {
	specs, err := a.processSpecs()
	if err != nil {
		return nil, err
	}
	var out []process.Manager
	for _, s := range specs {
		out = append(out, s.Manager)
	}
	return out, nil
}

// processStats reads instances by status and overdue deadlines of every
// tenant for the metrics.
func processStats(ctx context.Context, a *app, specs []process.Spec) ([]telemetry.ProcessStat, error) {
	tenants, err := projections.Tenants(ctx, a.projPool)
	if err != nil {
		return nil, err
	}
	counts, err := process.CountByStatus(ctx, a.projPool, tenants)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	overdue, err := process.OverdueByProcess(ctx, a.projPool, tenants, now)
	if err != nil {
		return nil, err
	}
	var out []telemetry.ProcessStat
	for _, s := range specs {
		name := s.Manager.Name()
		st := telemetry.ProcessStat{Process: name, ByStatus: counts[name]}
		if o, ok := overdue[name]; ok {
			st.Overdue = o.Deadlines
			if o.OldestDue != nil {
				st.OldestOverdue = now.Sub(*o.OldestDue)
			}
			if st.ByStatus == nil {
				st.ByStatus = map[string]int64{}
			}
			st.ByStatus["parked"] = o.Parked
		}
		out = append(out, st)
	}
	return out, nil
}

// selectProcesses keeps the processes STRATA_PROCESSES names: all (the
// default), none, or a comma-separated list of process names.
func selectProcesses(specs []process.Spec, setting string) ([]process.Spec, error) {
	switch setting = strings.TrimSpace(setting); setting {
	case "all":
		return specs, nil
	case "none":
		return nil, nil
	}
	byName := map[string]process.Spec{}
	var known []string
	for _, s := range specs {
		byName[s.Manager.Name()] = s
		known = append(known, s.Manager.Name())
	}
	var out []process.Spec
	for _, n := range strings.Split(setting, ",") {
		n = strings.TrimSpace(n)
		s, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("STRATA_PROCESSES=%q: no process %q (want all, none or some of: %s)", setting, n, strings.Join(known, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}
