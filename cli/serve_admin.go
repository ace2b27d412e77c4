package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/strata-es/strata/projections"
	"github.com/strata-es/strata/projections/relay"
	"github.com/strata-es/strata/readmodels"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/replay/adminapi"
	"github.com/strata-es/strata/telemetry"
	"github.com/strata-es/strata/tenancy/subjects"
	"github.com/strata-es/strata/tenancy/subjects/subjectapi"
)

// failurePolicy reads the projection runners' failure policy (decision 5)
// from STRATA_PROJECTION_RETRY_ATTEMPTS, _INITIAL and _MAX; serve's
// runners and `strata replay` share it.
func failurePolicy(e env) (projections.FailurePolicy, error) {
	var p projections.FailurePolicy
	if v := e.str("STRATA_PROJECTION_RETRY_ATTEMPTS", ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return p, fmt.Errorf("STRATA_PROJECTION_RETRY_ATTEMPTS=%q: want an integer from 1 to 1000", v)
		}
		p.Attempts = n
	}
	var err error
	if p.InitialDelay, err = e.duration("STRATA_PROJECTION_RETRY_INITIAL", 200*time.Millisecond); err != nil {
		return p, err
	}
	if p.MaxDelay, err = e.duration("STRATA_PROJECTION_RETRY_MAX", 10*time.Second); err != nil {
		return p, err
	}
	if p.MaxDelay < p.InitialDelay {
		return p, fmt.Errorf("STRATA_PROJECTION_RETRY_MAX (%s) is below STRATA_PROJECTION_RETRY_INITIAL (%s)", p.MaxDelay, p.InitialDelay)
	}
	return p, nil
}

// wireAdmin mounts the replay operations of the admin scope
// (/v1/admin/projections/{name}..., /v1/admin/dead-letters...) on the
// query API and exports the projections' lag and dead letters as metrics.
//
// The routes run the replay library as the projector login: dead letters
// are the projector's tables (the application role may only read them),
// and a retry re-applies events exactly as the runner would. Every access
// still sets the tenant of the token (or, with ?scope=all and the
// cross_tenant claim, each tenant in turn), so row-level security applies
// as everywhere else. Audit rows go to admin_audit as the application
// role, in the caller's tenant. Rebuilds started over HTTP run in this
// process until they finish or the process stops (they resume when started
// again).
func wireAdmin(a *app) error {
	policy, err := failurePolicy(a.env)
	if err != nil {
		return err
	}
	// Rebuilds' DDL and swaps run on the owner connection (nil without
	// DATABASE_URL: rebuilds are then refused with what to set).
	managers, err := a.processManagers()
	if err != nil {
		return err
	}
	relays, closeRelays, err := relayRepublishers(a.env, a.logger)
	if err != nil {
		return err
	}
	svc, err := replay.New(replay.Config{Pool: a.projPool, App: a.appPool, Owner: a.pools.owner, Log: a.log, Logger: a.logger,
		Projections: a.mods.Projections(), Processes: managers, Registry: a.registry,
		Runner:             projections.RunnerConfig{Failures: policy},
		ConsumerProjection: relay.ConsumerProjection, Relays: relays})
	if err != nil {
		closeRelays()
		return err
	}
	bg, stop := context.WithCancel(context.Background())
	a.workers = append(a.workers, worker{name: "admin rebuilds", run: func(ctx context.Context) error {
		<-ctx.Done()
		stop() // background rebuilds stop with the process; they resume when started again
		closeRelays()
		return nil
	}})
	reader := readmodels.NewDB(a.appPool)
	audit := func(ctx context.Context, e adminapi.Audit) error {
		return reader.RecordAudit(ctx, readmodels.AuditEntry{Subject: e.Subject, Action: e.Action, Target: e.Target, RequestID: e.RequestID})
	}
	adminapi.New(svc, audit, bg).Register(a.queryAPI)

	// Subject erasures: on the owner connection (503 without it), the
	// tenant's read models rebuilt by the same replay service.
	retention, err := backupRetention(a.env)
	if err != nil {
		return err
	}
	announce, err := erasureNotices(a.env, a.logger)
	if err != nil {
		return err
	}
	var eraser *subjects.Eraser
	if a.pools.owner != nil {
		if eraser, err = subjects.New(subjects.Config{Owner: a.pools.owner, Registry: a.registry, Processes: processPersonal(managers), BackupRetention: retention, Announce: announce, Rebuild: func(ctx context.Context, tenant string) (int, error) {
			res, err := svc.Rebuild(ctx, replay.RebuildOptions{Tenant: tenant, Actor: "subject erasure"})
			return len(res.Projections), err
		}}); err != nil {
			return err
		}
	}
	subjectapi.New(eraser, func(ctx context.Context, subject, action, target, requestID string) error {
		return reader.RecordAudit(ctx, readmodels.AuditEntry{Subject: subject, Action: action, Target: target, RequestID: requestID})
	}, bg, a.logger).Register(a.queryAPI)

	// strata_dead_letters{projection} and the lag, at scrape time: the
	// monitor's lag over the whole log and the checkpoints' counters.
	monitor := projections.NewMonitor(projections.MonitorConfig{App: a.appPool, Log: a.log, Names: projections.Names(a.mods.Projections())})
	a.metrics.RegisterProjections(func(ctx context.Context) ([]telemetry.ProjectionStat, error) {
		list, err := monitor.All(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]telemetry.ProjectionStat, 0, len(list))
		for _, s := range list {
			out = append(out, telemetry.ProjectionStat{Name: s.Name, LagEvents: float64(s.LagEvents), LagSeconds: s.LagSeconds,
				DeadLetters: float64(s.ParkedLetters)})
		}
		return out, nil
	})
	return nil
}
