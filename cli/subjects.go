package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/commands/commandapi"
	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/replay"
	"github.com/strata-es/strata/tenancy"
	"github.com/strata-es/strata/tenancy/subjects"
)

const subjectsUsage = `strata subjects — forget one data subject of a tenant (docs/personal-data.md, "Forget a subject"); needs the owner connection (DATABASE_URL)

Usage:
  strata subjects erase TENANT SUBJECT --reason "..." [--json]
  strata subjects verify TENANT SUBJECT [--json]

erase destroys the subject's data key (every personal field it sealed, in the
log, dead letters and the broker, reads as its tombstone from then on), deletes
the idempotency records of the subject's commands and the tenant's stored export
archives, and rebuilds the tenant's read models from the log. It prints the
receipt. A run stopped anywhere is resumed by running it again.

verify checks that the subject has a finished erasure, that no data key can
open what its key sealed, and that no column of the tenant's tables holds the
subject's ID in plaintext; it exits 1 and lists what it found otherwise.
`

// subjectEraseAfter, when set (tests), is called after each step.
var subjectEraseAfter func(step string) error

func cmdSubjects(ctx context.Context, args []string, e env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, subjectsUsage)
		return exitUsage
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, subjectsUsage)
		return exitOK
	}
	sub := args[0]
	if sub != "erase" && sub != "verify" || len(args) < 3 {
		fmt.Fprintf(stderr, "strata subjects: want erase|verify TENANT SUBJECT\n\n%s", subjectsUsage)
		return exitUsage
	}
	tenant, subject := args[1], args[2]
	fs := flag.NewFlagSet("subjects "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	reason := fs.String("reason", "", "erase: why the subject is forgotten (kept in the receipt)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[3:]); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 || sub == "erase" && *reason == "" {
		fmt.Fprintf(stderr, "strata subjects %s: --reason is required to erase, and nothing goes after the flags\n\n%s", sub, subjectsUsage)
		return exitUsage
	}
	_, owner, closeOwner, err := openTenantStorePool(ctx, e, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitFailure
	}
	defer closeOwner()
	if sub == "verify" {
		return verifySubject(ctx, e, owner, domain.TenantID(tenant), subject, *asJSON, stdout, stderr)
	}
	retention, err := backupRetention(e)
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitUsage
	}
	env, err := openReplay(ctx, e, stderr, 0)
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitFailure
	}
	defer env.close()
	registry, processes, err := personalDeclarations(e)
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitFailure
	}
	announce, err := erasureNotices(e, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitUsage
	}
	eraser, err := subjects.New(subjects.Config{Owner: owner, Registry: registry, Processes: processes, BackupRetention: retention, Announce: announce,
		Rebuild: func(ctx context.Context, tenant string) (int, error) {
			res, err := env.svc.Rebuild(ctx, replay.RebuildOptions{Tenant: tenant, Actor: "cli:" + osUser()})
			return len(res.Projections), err
		},
		After: subjectEraseAfter,
		Progress: func(step string) {
			if !*asJSON {
				fmt.Fprintf(stdout, "erase a subject of %s: step %s\n", tenant, step)
			}
		}})
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitFailure
	}
	r, err := eraser.Erase(ctx, subjects.Request{Tenant: domain.TenantID(tenant), Subject: subject, Reason: *reason, Actor: "cli:" + osUser()})
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		if errors.Is(err, subjects.ErrInvalid) {
			return exitUsage
		}
		return exitFailure
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(r); err != nil {
			return exitFailure
		}
		return exitOK
	}
	for _, s := range r.Stores {
		fmt.Fprintf(stdout, "  %-22s %-11s %d  %s\n", s.Name, s.Mode, s.Count, s.Note)
	}
	fmt.Fprintf(stdout, "receipt %s: key %s destroyed (pseudonym %s), content hash %s\n", r.ErasureID, r.KeyID, r.Pseudonym, r.ContentHash)
	return exitOK
}

func verifySubject(ctx context.Context, e env, owner *pgxpool.Pool, tenant domain.TenantID, subject string, asJSON bool, stdout, stderr io.Writer) int {
	registry, processes, err := personalDeclarations(e)
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitFailure
	}
	broker, err := brokerReader(e, owner, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitUsage
	}
	eraser, err := subjects.New(subjects.Config{Owner: owner, Registry: registry, Processes: processes, Broker: broker})
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitFailure
	}
	v, err := eraser.Verify(ctx, tenant, subject)
	if err != nil {
		fmt.Fprintln(stderr, "strata subjects:", err)
		return exitFailure
	}
	if asJSON {
		_ = json.NewEncoder(stdout).Encode(map[string]any{"ok": v.OK(), "verification": v})
	} else {
		for _, f := range v.Findings {
			fmt.Fprintf(stdout, "FOUND %s: %d (%s)\n", f.Store, f.Count, f.What)
		}
		fmt.Fprintf(stdout, "%d columns of %s's tables scanned; erasure %s, key %s\n", v.Columns, tenant, v.ErasureID, v.KeyID)
	}
	if !v.OK() {
		fmt.Fprintf(stderr, "strata subjects verify: the subject is not forgotten: %d findings\n", len(v.Findings))
		return exitFailure
	}
	return exitOK
}

// backupRetention reads STRATA_BACKUP_RETENTION: how long the deployment
// keeps its backups ("35d", "72h"), which dates the receipt's backups
// line; unset, the receipt says the retention is the deployment's.
func backupRetention(e env) (time.Duration, error) {
	v := e.str("STRATA_BACKUP_RETENTION", "")
	if v == "" {
		return 0, nil
	}
	w, err := tenancy.ParseWindow(v)
	if err != nil || w.Keep {
		return 0, fmt.Errorf("STRATA_BACKUP_RETENTION=%q: want days (35d) or a duration (72h)", v)
	}
	return w.D, nil
}

// personalDeclarations returns the modules' declarations of personal data:
// the registry's (events) and the process managers' (by name).
func personalDeclarations(e env) (*event.Registry, map[string][]event.PersonalField, error) {
	registry, err := e.mods.Registry()
	if err != nil {
		return nil, nil, err
	}
	specs, err := e.mods.Processes(commandapi.Deps{Config: commands.Config{Registry: registry}}, e.get)
	if err != nil {
		return nil, nil, err
	}
	managers := make([]process.Manager, 0, len(specs))
	for _, sp := range specs {
		managers = append(managers, sp.Manager)
	}
	return registry, processPersonal(managers), nil
}

// processPersonal returns the declared personal fields of managers, by
// process name (process.Definition.Personal).
func processPersonal(managers []process.Manager) map[string][]event.PersonalField {
	out := make(map[string][]event.PersonalField, len(managers))
	for _, m := range managers {
		if p := m.Personal(); len(p) > 0 {
			out[m.Name()] = p
		}
	}
	return out
}
