package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/orders/ordertest"
	"github.com/strata-es/strata/internal/pgembed"
)

// RESTORE: a rehearsed point-in-time restore (issue 20, docs/operations.md
// "Backup and restore"). A primary that archives its WAL runs the load; a
// base backup is taken and a named restore point created while commands
// are in flight; then the backup is restored into a fresh cluster up to
// the restore point and strata starts on it.
const Restore = "RESTORE"

// RestoreConfig sizes RESTORE.
type RestoreConfig struct {
	Load      LoadConfig
	Processes int
	// SeedEvents are written into the log (as order histories of tenants
	// of their own) before the load, and projected, so that the restore's
	// time is measured on a log of that size.
	SeedEvents int
	// BackupAt and TargetAt: when, as fractions of the load's pace, the base
	// backup starts and the restore point is created.
	BackupAt, TargetAt float64
	// ArchiveTimeout is the primary's archive_timeout: the most WAL time a
	// lost primary could take with it (the RPO of an unplanned restore).
	ArchiveTimeout time.Duration
	// CatchUp bounds the restored system's projections reaching the
	// restored head after strata starts on it.
	CatchUp time.Duration
}

// DefaultRestore is RESTORE's size in `make chaos`: 200,000 seeded events
// (docs/operations.md reports the run with --restore-events 1000000).
func DefaultRestore() RestoreConfig {
	return RestoreConfig{
		Load: LoadConfig{Clients: 4, Commands: 300, Tenants: 3, Streams: 24,
			Pace: 30 * time.Second, MaxDuration: 90 * time.Second,
			RequestTimeout: 10 * time.Second, RetryFor: 30 * time.Second},
		Processes: 2, SeedEvents: 200_000, BackupAt: 0.2, TargetAt: 0.6,
		ArchiveTimeout: 5 * time.Second, CatchUp: 30 * time.Second,
	}
}

func (c RestoreConfig) validate() error {
	switch {
	case c.Processes < 1 || c.SeedEvents < 0:
		return errors.New("RESTORE: want at least one process and no negative seed")
	case c.BackupAt < 0 || c.TargetAt <= c.BackupAt || c.TargetAt >= 1:
		return errors.New("RESTORE: want 0 <= backup at < target at < 1")
	case c.ArchiveTimeout < time.Second || c.CatchUp <= 0:
		return errors.New("RESTORE: want an archive timeout of at least 1s and a positive catch-up bound")
	}
	return nil
}

// restoreSeedTenants are the seeded histories' tenants (ordertest's t-N).
const restoreSeedTenants = 4

func (e *env) runRestore(ctx context.Context, r *Result) error {
	cfg := e.cfg.Restore
	if cfg.Processes == 0 {
		cfg = DefaultRestore()
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	r.Title = "point-in-time restore of a base backup and archived WAL taken under load"
	archive := filepath.Join(e.dir, "restore-wal")
	if err := mkdirForPostgres(archive); err != nil {
		return err
	}
	settings := map[string]string{
		"wal_level": "replica", "archive_mode": "on",
		"archive_command": fmt.Sprintf("test ! -f %s/%%f && cp %%p %s/%%f", archive, archive),
		"archive_timeout": strconv.Itoa(int(cfg.ArchiveTimeout.Seconds())),
		"max_wal_size":    "2GB",
	}
	for k, v := range durableSettings {
		settings[k] = v
	}
	primary, err := pgembed.Start(ctx, pgembed.Config{DataDir: filepath.Join(e.dir, "restore-primary"), BinDir: e.cfg.PGBin,
		Mode: pgembed.Child, Settings: settings, Logf: e.logf})
	if err != nil {
		return fmt.Errorf("start the archiving primary: %w", err)
	}
	defer stopServer(ctx, primary, e.logf)
	src := *e
	src.pg = primary
	s, err := src.startLoadScenario(ctx, Restore, cfg.Load, cfg.Processes, nil)
	if err != nil {
		return err
	}
	defer s.sup.Stop(5 * time.Second)

	if cfg.SeedEvents > 0 {
		began := time.Now()
		evs := ordertest.Generate(ordertest.Config{Seed: uint64(e.cfg.Seed), Tenants: restoreSeedTenants, Orders: cfg.SeedEvents/5 + 1, Customers: 500, Open: 200,
			Start: time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC), Spacing: time.Minute})[:cfg.SeedEvents]
		if err := ordertest.Seed(ctx, s.url, evs, 5000); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		head, err := logHeadAt(ctx, s.url)
		if err != nil {
			return err
		}
		seeded := time.Since(began)
		at, ok, behind, err := waitAtHead(ctx, s.url, head, 10*time.Minute)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("the seeded log was not projected within 10 minutes: %s", behind)
		}
		e.logf("RESTORE: seeded %d events in %s, projected in %s", cfg.SeedEvents, seeded.Round(time.Millisecond), at.Sub(began.Add(seeded)).Round(time.Millisecond))
	}

	// The load, with the backup and the restore point taken during it.
	base := filepath.Join(e.dir, "restore-base")
	var backupErr, targetErr error
	var backupTook time.Duration
	var rpBegan, rpDone time.Time
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sleepCtx(ctx, time.Duration(cfg.BackupAt*float64(cfg.Load.Pace)))
		began := time.Now()
		backupErr = primary.BaseBackup(ctx, base)
		backupTook = time.Since(began)
		e.logf("RESTORE: base backup taken under load in %s (err %v)", backupTook.Round(time.Millisecond), backupErr)
		if d := time.Until(s.load.started.Add(time.Duration(cfg.TargetAt * float64(cfg.Load.Pace)))); d > 0 {
			sleepCtx(ctx, d)
		}
		conn, err := connectAdmin(ctx, primary.URLFor(s.db))
		if err != nil {
			targetErr = err
			return
		}
		defer conn.Close(context.WithoutCancel(ctx))
		rpBegan = time.Now()
		_, targetErr = conn.Exec(ctx, `SELECT pg_create_restore_point('strata-chaos')`)
		rpDone = time.Now()
		e.logf("RESTORE: restore point created at %s, %d of %d commands done", rpDone.Format("15:04:05.000"), s.load.done.Load(), cfg.Load.Clients*cfg.Load.Commands)
	}()
	e.runLoad(ctx, s)
	wg.Wait()
	if err := errors.Join(backupErr, targetErr); err != nil {
		return err
	}
	// Push the segment holding the restore point into the archive.
	if err := switchAndArchive(ctx, primary.URL(), 30*time.Second); err != nil {
		return err
	}
	s.sup.Stop(25 * time.Second)
	ops := s.load.hist.Ops()
	if err := s.load.hist.WriteFile(filepath.Join(e.dir, s.db+"-history.jsonl")); err != nil {
		return err
	}
	stopServer(ctx, primary, e.logf) // a disaster: only the backup and the archive are left

	// The restore, timed: copy and recover to the target, then strata up
	// with its projections at the restored head.
	restoreBegan := time.Now()
	restored, err := pgembed.Start(ctx, pgembed.Config{DataDir: filepath.Join(e.dir, "restore-target"), BinDir: e.cfg.PGBin,
		Mode: pgembed.Child, RecoverFrom: base, Logf: e.logf, Settings: mergeSettings(durableSettings, map[string]string{
			"restore_command":          fmt.Sprintf("cp %s/%%f %%p", archive),
			"recovery_target_name":     "strata-chaos",
			"recovery_target_action":   "promote",
			"recovery_target_timeline": "current",
		})})
	if err != nil {
		return fmt.Errorf("start the restore: %w", err)
	}
	defer stopServer(ctx, restored, e.logf)
	url := restored.URLFor(s.db)
	if err := waitPromoted(ctx, restored.URL(), 10*time.Minute); err != nil {
		return err
	}
	recovered := time.Since(restoreBegan)
	e.logf("RESTORE: recovered to the restore point and promoted in %s", recovered.Round(time.Millisecond))

	// Before strata touches it: what the restored database holds.
	conn, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	head, err := logHead(ctx, conn)
	if err != nil {
		return err
	}
	ahead, aheadEx, err := checkpointsAhead(ctx, conn, head)
	if err != nil {
		return err
	}
	events, err := loadEvents(ctx, url)
	if err != nil {
		return err
	}
	v := checkRestoredHistory(ops, events, rpBegan, rpDone)
	r.zero("commands acknowledged before the recovery target missing after the restore", v.lost)
	r.zero("commands begun after the recovery target present after the restore", v.after)
	r.zero("commands applied more than once", v.duplicated)
	r.zero("rejected commands with events", v.rejectedWithEvents)
	r.zero("acknowledged version differs from the restored log", v.wrongVersion)
	r.zero("events of no command (phantoms)", v.phantoms)
	r.zero("streams with version gaps", v.gaps)
	r.check("seeded events restored", strconv.Itoa(cfg.SeedEvents), v.seeded, v.seeded == cfg.SeedEvents)
	r.check("commands on both sides of the target", "some before and some after", fmt.Sprintf("%d acknowledged before, %d begun after, %d in flight, %d rejected", v.before, v.afterOps, v.straddling, v.rejected),
		v.before > 0 && v.afterOps > 0)
	r.zero("projection and process checkpoints ahead of the restored log", ahead)
	for _, ex := range append(v.examples, aheadEx...) {
		r.note("%s", ex)
	}
	recAhead, recEx, err := idempotencyAhead(ctx, conn, events)
	if err != nil {
		return err
	}
	r.zero("idempotency records of commands not in the restored log", recAhead)
	for _, ex := range recEx {
		r.note("IDEMPOTENCY RECORD AHEAD: %s", ex)
	}
	var before []*Op
	for _, op := range ops {
		if op.Outcome == OK && op.End.Before(rpBegan) {
			before = append(before, op)
		}
	}
	bad, examples, err := checkIdempotencyRecords(ctx, url, before)
	if err != nil {
		return err
	}
	r.zero("commands acknowledged before the target whose idempotency record differs", bad)
	for _, ex := range examples {
		r.note("IDEMPOTENCY RECORD: %s", ex)
	}

	// strata on the restored cluster.
	dst := *e
	dst.pg = restored
	var specs []procSpec
	for i := 0; i < cfg.Processes; i++ {
		pname := fmt.Sprintf("restore-restored%d", i)
		specs = append(specs, procSpec{Name: pname, Roles: "command,query,projector", Env: e.strataEnv(url, filepath.Join(e.dir, "data", pname))})
	}
	sup, err := newSupervisor(e.cfg.Strata, filepath.Join(e.dir, "logs"), specs)
	if err != nil {
		return err
	}
	defer sup.Stop(5 * time.Second)
	started := time.Now()
	if err := sup.Start(); err != nil {
		return err
	}
	if err := sup.WaitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	at, ok, behind, err := waitAtHead(ctx, url, head, max(3*cfg.CatchUp, time.Minute))
	if err != nil {
		return err
	}
	if !ok {
		r.note("projections not at the restored head %s: %s", head, behind)
	}
	r.within("restored system's projections at the restored head after strata starts", cfg.CatchUp, max(at.Sub(started), 0), ok)
	// The RTO leaves out the harness's own checks between the recovery and
	// strata's start (reading the whole restored log).
	serving := max(at.Sub(started), 0)
	rto := recovered + serving
	r.note("RTO %s for a log of %d events: copy of the base backup and recovery to the target %s, then strata started, ready, projections at the head %s (the base backup itself was taken under load in %s)",
		rto.Round(10*time.Millisecond), len(events), recovered.Round(10*time.Millisecond), serving.Round(10*time.Millisecond), backupTook.Round(10*time.Millisecond))
	r.note("RPO at the named target: %d commands acknowledged before it, all restored; after an unplanned loss of the primary, at most archive_timeout=%s of commits (the segment not yet archived)",
		v.before, cfg.ArchiveTimeout)
	sup.Stop(25 * time.Second)
	rv, err := dst.compareWithRebuild(ctx, s.db)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	r.check("restored read models equal a fresh rebuild of the restored log (table x tenant checksums)", "all equal",
		fmt.Sprintf("%d/%d equal", rv.Compared-len(rv.Mismatches), rv.Compared), len(rv.Mismatches) == 0 && rv.Compared > 0)
	for i, m := range rv.Mismatches {
		if i == 10 {
			break
		}
		r.note("%s", m)
	}
	return dst.verifyLedgers(ctx, r, url, s.db+"-restored")
}

// restoredVerdict is what the restored log says about the history.
type restoredVerdict struct {
	before, afterOps, straddling int
	rejected, rejectedWithEvents int
	lost, after, duplicated      int
	wrongVersion, phantoms, gaps int
	seeded                       int
	examples                     []string
}

func (v *restoredVerdict) example(format string, args ...any) {
	if len(v.examples) < 12 {
		v.examples = append(v.examples, fmt.Sprintf(format, args...))
	}
}

// checkRestoredHistory: every command acknowledged before the restore
// point was begun is in the restored log exactly once at its version; no
// command begun after the restore point was created is; those in between
// are in at most once; every event is of the history or the seed, and
// every stream's versions are 1..n.
func checkRestoredHistory(ops []*Op, events []logEvent, rpBegan, rpDone time.Time) restoredVerdict {
	var v restoredVerdict
	byCommand := map[string][]logEvent{}
	for _, ev := range events {
		if isSeedTenant(ev.Tenant) {
			v.seeded++
			continue
		}
		byCommand[ev.CommandID] = append(byCommand[ev.CommandID], ev)
	}
	known := map[string]bool{}
	for _, op := range ops {
		id := commandID(op.Tenant, op.Key)
		known[id] = true
		evs := byCommand[id]
		if len(evs) > eventsPerCommand {
			v.duplicated++
			v.example("DUPLICATED: %s %s of %s/%s: %d events", op.Kind, op.Key, op.Tenant, op.Order, len(evs))
		}
		switch {
		case op.Outcome == Fail:
			v.rejected++
			if len(evs) > 0 {
				v.rejectedWithEvents++
				v.example("REJECTED BUT RESTORED: %s %s of %s/%s answered %d %s", op.Kind, op.Key, op.Tenant, op.Order, op.Status, op.Code)
			}
		case op.Outcome == OK && op.End.Before(rpBegan):
			v.before++
			if len(evs) == 0 {
				v.lost++
				v.example("LOST IN THE RESTORE: %s %s of %s/%s acknowledged at %s, before the target", op.Kind, op.Key, op.Tenant, op.Order, op.End.Format("15:04:05.000"))
			} else if evs[len(evs)-1].Version != op.Version {
				v.wrongVersion++
				v.example("%s %s of %s/%s acknowledged version %d, restored at %d", op.Kind, op.Key, op.Tenant, op.Order, op.Version, evs[len(evs)-1].Version)
			}
		case op.Start.After(rpDone):
			v.afterOps++
			if len(evs) > 0 {
				v.after++
				v.example("AFTER THE TARGET, YET RESTORED: %s %s of %s/%s begun at %s", op.Kind, op.Key, op.Tenant, op.Order, op.Start.Format("15:04:05.000"))
			}
		default:
			v.straddling++
		}
	}
	for id, evs := range byCommand {
		if !known[id] {
			v.phantoms += len(evs)
			v.example("PHANTOM: %d event(s) with command id %q, e.g. %s/%s v%d", len(evs), id, evs[0].Tenant, evs[0].Stream, evs[0].Version)
		}
	}
	_, v.gaps = streamGaps(events, v.example)
	return v
}

func isSeedTenant(t string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(t, "t-"))
	return strings.HasPrefix(t, "t-") && err == nil && n >= 1 && n <= restoreSeedTenants
}

// checkpointsAhead counts checkpoints (projections, process managers, the
// relay: every row of projection_checkpoints) beyond the log's head.
func checkpointsAhead(ctx context.Context, conn *pgx.Conn, head event.Position) (int, []string, error) {
	cps, err := readCheckpoints(ctx, conn)
	if err != nil {
		return 0, nil, err
	}
	var n int
	var ex []string
	for name, cp := range cps {
		if head.Less(cp.Position) {
			n++
			ex = append(ex, fmt.Sprintf("CHECKPOINT AHEAD: %s at %s, the restored log ends at %s", name, cp.Position, head))
		}
	}
	return n, ex, nil
}

// idempotencyAhead counts stored command outcomes whose command has no
// event in the restored log although the outcome says it appended.
func idempotencyAhead(ctx context.Context, conn *pgx.Conn, events []logEvent) (int, []string, error) {
	have := map[string]bool{}
	for _, ev := range events {
		have[ev.CommandID] = true
	}
	rows, err := conn.Query(ctx, `SELECT tenant_id, key, response FROM strata.idempotency_keys`)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var n int
	var ex []string
	for rows.Next() {
		var tenant, key string
		var resp []byte
		if err := rows.Scan(&tenant, &key, &resp); err != nil {
			return 0, nil, err
		}
		if strings.Contains(string(resp), `"status":20`) && !have[commandID(tenant, key)] {
			n++
			if len(ex) < 5 {
				ex = append(ex, fmt.Sprintf("%s/%s: %s", tenant, key, oneLine(string(resp), 120)))
			}
		}
	}
	return n, ex, rows.Err()
}

// switchAndArchive closes the current WAL segment and waits until the
// archiver has stored it.
func switchAndArchive(ctx context.Context, url string, limit time.Duration) error {
	conn, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var segment string
	if err := conn.QueryRow(ctx, `SELECT pg_walfile_name(pg_switch_wal())`).Scan(&segment); err != nil {
		return fmt.Errorf("switch WAL: %w", err)
	}
	deadline := time.Now().Add(limit)
	for {
		var last string
		var failed int64
		if err := conn.QueryRow(ctx, `SELECT coalesce(last_archived_wal, ''), failed_count FROM pg_stat_archiver`).Scan(&last, &failed); err != nil {
			return err
		}
		if last >= segment {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("WAL segment %s not archived within %s (last archived %q, %d failures)", segment, limit, last, failed)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// waitPromoted waits for the end of recovery (recovery_target_action =
// promote).
func waitPromoted(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		conn, err := connectAdmin(ctx, url)
		if err == nil {
			var inRecovery bool
			err = conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil && !inRecovery {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the restored cluster did not finish recovery within %s (last error: %v)", limit, err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func stopServer(ctx context.Context, srv *pgembed.Server, logf func(string, ...any)) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Stop(sctx); err != nil {
		logf("chaos: stopping PostgreSQL %s: %v", srv.DataDir(), err)
	}
}

func mergeSettings(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// mkdirForPostgres makes dir writable by the server's OS user (postgres
// when the harness runs as root).
func mkdirForPostgres(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
