package db

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// EngineLineName names the engine's own migration line: the event log,
// checkpoints, dead letters, idempotency records, the relay, the audit
// trail. Every other line is a module's (its read-model tables).
const EngineLineName = "strata"

// Line is one sequence of numbered migrations with its own versions,
// applied in order and recorded by line and version. The engine has one
// (Engine); each module that owns tables has its own, embedded in the
// module (river's migration lines, riverdriver GetMigrationFS(line)).
type Line struct {
	// Name identifies the line in schema_migrations: [a-z][a-z0-9_]{0,30}.
	Name string
	// FS holds the files NNN_name.up.sql and NNN_name.down.sql at its root,
	// numbered contiguously from 001. Applied migrations are immutable:
	// their checksums are recorded.
	FS fs.FS
	// Adopts lists migrations of this line whose tables an older strata
	// created in another line. Such a migration is recorded as applied
	// without running when the other line's migration is applied with the
	// named checksum: the database already has exactly these tables.
	Adopts []Adoption
	// Tables declares every table the line's migrations create, each in
	// its class (tables.go): the erasure's inventory and the catalog test
	// read them, so a line's table is never in no classification.
	Tables []Table
}

// EmbeddedLine returns the line name whose files are in dir of fsys (a
// module's //go:embed migrations/*.sql, dir "migrations"), with its
// adoptions and the declarations of its tables (Declare, TenantTables). It
// panics on a missing dir: lines are embedded at build time.
func EmbeddedLine(name string, fsys fs.FS, dir string, opts ...LineOption) Line {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("db: migration line %s: %v", name, err))
	}
	l := Line{Name: name, FS: sub}
	for _, o := range opts {
		o.applyLine(&l)
	}
	return l
}

// Adoption: Version of the adopting line is what FromLine's FromVersion
// created when it had the checksum FromChecksum.
type Adoption struct {
	Version      int
	FromLine     string
	FromVersion  int
	FromChecksum string
}

// Migration is one numbered schema change of a line, embedded in the
// binary.
type Migration struct {
	Line     string
	Version  int
	Name     string
	Up, Down string
	Checksum string // sha256 of Up
}

// ID is "line/NNN_name".
func (m Migration) ID() string { return fmt.Sprintf("%s/%03d_%s", m.Line, m.Version, m.Name) }

var (
	migrationName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)
	lineName      = regexp.MustCompile(`^[a-z][a-z0-9_]{0,30}$`)
)

// legacyReadSide is the checksum of the engine's 002_read_side as it
// shipped before modules existed, when it also created the orders
// module's tables (which the orders line now creates, adopting them on
// databases migrated by that version).
const legacyReadSide = "e50b8d72c60b505e2ffd53db90fa19c207942362ecf89dab474207131af6f9b3"

// superseded lists checksums an applied engine migration may have besides
// its current one: rewrites that kept what the engine's tables are. Only
// 002, whose module tables moved into the orders line.
var superseded = map[int][]string{2: {legacyReadSide}}

// LegacyReadSideChecksum is the checksum the orders line adopts its first
// migration from (see Adoption).
const LegacyReadSideChecksum = legacyReadSide

// Engine is the engine's migration line.
func Engine() Line {
	return EmbeddedLine(EngineLineName, migrationFiles, "migrations", Declare(engineTables()...))
}

// Migrations returns the line's migrations in version order. It panics on
// a malformed line: lines are embedded at build time, and the tests of
// every line read them.
func (l Line) Migrations() []Migration {
	if !lineName.MatchString(l.Name) {
		panic(fmt.Sprintf("db: migration line name %q: want [a-z][a-z0-9_]{0,30}", l.Name))
	}
	entries, err := fs.ReadDir(l.FS, ".")
	if err != nil {
		panic(fmt.Sprintf("db: migration line %s: %v", l.Name, err))
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			panic("db: badly named migration " + l.Name + "/" + e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(l.FS, e.Name())
		if err != nil {
			panic(err)
		}
		mg := byVersion[v]
		if mg == nil {
			mg = &Migration{Line: l.Name, Version: v, Name: m[2]}
			byVersion[v] = mg
		}
		if m[3] == "up" {
			mg.Up = string(body)
			sum := sha256.Sum256(body)
			mg.Checksum = hex.EncodeToString(sum[:])
		} else {
			mg.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" {
			panic(fmt.Sprintf("db: migration %s/%03d has no up file", l.Name, m.Version))
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			panic(fmt.Sprintf("db: migration versions of line %s must be contiguous from 1; found %03d", l.Name, m.Version))
		}
	}
	return out
}

// Latest is the line's newest version.
func (l Line) Latest() int { return len(l.Migrations()) }

// withEngine returns the engine's line followed by the given lines (the
// engine's given again is dropped), checking names are unique.
func withEngine(lines []Line) ([]Line, error) {
	out := []Line{Engine()}
	seen := map[string]bool{EngineLineName: true}
	for _, l := range lines {
		if l.Name == EngineLineName {
			continue
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("migration line %q is given twice", l.Name)
		}
		seen[l.Name] = true
		out = append(out, l)
	}
	return out, nil
}

// Fingerprint identifies the migrations of the engine and lines (test
// templates are keyed by it, so a changed migration builds a new one).
func Fingerprint(lines ...Line) string {
	all, err := withEngine(lines)
	if err != nil {
		panic(err)
	}
	h := sha256.New()
	for _, l := range all {
		for _, m := range l.Migrations() {
			h.Write([]byte(m.ID() + "=" + m.Checksum + "\n"))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// MigrationStatus is one row of `strata migrate status`.
type MigrationStatus struct {
	Line      string
	Version   int
	Name      string
	AppliedAt time.Time // zero when pending
	// Adopted is set when the migration was recorded without running: an
	// older strata created its tables in another line (Line.Adopts).
	Adopted bool
	// Modified is set when the applied migration's checksum differs from
	// the embedded one: someone edited a migration after it shipped.
	Modified bool
}

// migrateLockID serialises concurrent migrators on one database.
const migrateLockID = 0x5354524154414d47 // "STRATAMG"

// Logf prints progress; nil means silent.
type Logf func(format string, args ...any)

func (l Logf) printf(format string, args ...any) {
	if l != nil {
		l(format, args...)
	}
}

type appliedKey struct {
	line    string
	version int
}

type appliedRow struct {
	at       time.Time
	checksum string
	adopted  bool
}

// Up applies every pending migration of the engine's line and then of
// each given line, in order. url must connect as a role that may create
// roles and schemas (or for which an operator has created them, see
// docs/operations.md); each migration runs in its own transaction as
// RoleOwner, so the objects it creates are owned by that role, not by the
// login role and never by the application roles.
func Up(ctx context.Context, url string, logf Logf, lines ...Line) error {
	all, err := withEngine(lines)
	if err != nil {
		return err
	}
	return withMigrationConn(ctx, url, func(conn *pgx.Conn) error {
		applied, err := appliedMigrations(ctx, conn, all)
		if err != nil {
			return err
		}
		pending := 0
		for _, l := range all {
			for _, m := range l.Migrations() {
				if _, ok := applied[appliedKey{m.Line, m.Version}]; ok {
					continue
				}
				pending++
				start := time.Now()
				adopted := adoptable(l, m, applied)
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+RoleOwner); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+Schema); err != nil {
						return err
					}
					if !adopted {
						if _, err := tx.Exec(ctx, m.Up); err != nil {
							return err
						}
					}
					_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (line, version, name, checksum, adopted) VALUES ($1, $2, $3, $4, $5)`,
						m.Line, m.Version, m.Name, m.Checksum, adopted)
					return err
				})
				if err != nil {
					return fmt.Errorf("migration %s: %w", m.ID(), err)
				}
				applied[appliedKey{m.Line, m.Version}] = appliedRow{checksum: m.Checksum, adopted: adopted}
				if adopted {
					logf.printf("adopted migration %s (its tables exist already)", m.ID())
				} else {
					logf.printf("applied migration %s in %s", m.ID(), time.Since(start).Round(time.Millisecond))
				}
			}
		}
		if pending == 0 {
			logf.printf("schema is up to date (%s)", versions(all))
		}
		if _, ok := applied[appliedKey{EngineLineName, 9}]; ok {
			// Every tenant table, a module's too, gets the eraser's grant
			// and policy (migration 009, docs/tenants.md "Erasure").
			if _, err := EnsureEraserGrants(ctx, conn); err != nil {
				return err
			}
		}
		return nil
	})
}

// adoptable reports whether m may be recorded without running (Adopts).
func adoptable(l Line, m Migration, applied map[appliedKey]appliedRow) bool {
	for _, a := range l.Adopts {
		if a.Version != m.Version {
			continue
		}
		if r, ok := applied[appliedKey{a.FromLine, a.FromVersion}]; ok && r.checksum == a.FromChecksum {
			return true
		}
	}
	return false
}

func versions(lines []Line) string {
	parts := make([]string, len(lines))
	for i, l := range lines {
		parts[i] = fmt.Sprintf("%s %d", l.Name, l.Latest())
	}
	return strings.Join(parts, ", ")
}

// Down reverts the newest steps applied migrations: the given lines'
// newest first (last line first), the engine's last.
func Down(ctx context.Context, url string, steps int, logf Logf, lines ...Line) error {
	all, err := withEngine(lines)
	if err != nil {
		return err
	}
	return withMigrationConn(ctx, url, func(conn *pgx.Conn) error {
		for i := 0; i < steps; i++ {
			applied, err := appliedMigrations(ctx, conn, all)
			if err != nil {
				return err
			}
			m, ok := newestApplied(all, applied)
			if !ok {
				logf.printf("nothing to revert")
				return nil
			}
			if m.Down == "" {
				return fmt.Errorf("migration %s has no down file", m.ID())
			}
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+RoleOwner); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+Schema); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, m.Down); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `DELETE FROM strata.schema_migrations WHERE line = $1 AND version = $2`, m.Line, m.Version)
				return err
			})
			if err != nil {
				return fmt.Errorf("revert %s: %w", m.ID(), err)
			}
			logf.printf("reverted migration %s", m.ID())
		}
		return nil
	})
}

func newestApplied(all []Line, applied map[appliedKey]appliedRow) (Migration, bool) {
	for i := len(all) - 1; i >= 0; i-- {
		ms := all[i].Migrations()
		for j := len(ms) - 1; j >= 0; j-- {
			if _, ok := applied[appliedKey{ms[j].Line, ms[j].Version}]; ok {
				return ms[j], true
			}
		}
	}
	return Migration{}, false
}

// Status lists every migration of the engine's and the given lines and
// whether it is applied.
func Status(ctx context.Context, url string, lines ...Line) ([]MigrationStatus, error) {
	all, err := withEngine(lines)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	applied := map[appliedKey]appliedRow{}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('strata.schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, err
	}
	if exists {
		if applied, err = readApplied(ctx, conn); err != nil {
			return nil, err
		}
	}
	var out []MigrationStatus
	for _, l := range all {
		for _, m := range l.Migrations() {
			st := MigrationStatus{Line: m.Line, Version: m.Version, Name: m.Name}
			if r, ok := applied[appliedKey{m.Line, m.Version}]; ok {
				st.AppliedAt, st.Adopted = r.at, r.adopted
				st.Modified = !checksumMatches(m, r.checksum)
			}
			out = append(out, st)
		}
	}
	return out, nil
}

func checksumMatches(m Migration, sum string) bool {
	if sum == m.Checksum {
		return true
	}
	if m.Line == EngineLineName {
		for _, old := range superseded[m.Version] {
			if sum == old {
				return true
			}
		}
	}
	return false
}

// Check reports, through an existing connection of any strata role,
// whether every migration of the engine's and the given lines is applied:
// nil, or an error naming each line that is behind (ErrSchemaBehind) or
// ahead of this binary.
func Check(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, lines ...Line) error {
	all, err := withEngine(lines)
	if err != nil {
		return err
	}
	rows, err := q.Query(ctx, `SELECT line, max(version) FROM strata.schema_migrations GROUP BY line`)
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (appliedKey, error) {
		var k appliedKey
		return k, r.Scan(&k.line, &k.version)
	})
	if err != nil {
		return err
	}
	at := map[string]int{}
	for _, k := range have {
		at[k.line] = k.version
	}
	var behind, ahead []string
	for _, l := range all {
		switch v := at[l.Name]; {
		case v < l.Latest():
			behind = append(behind, fmt.Sprintf("%s at %d, want %d", l.Name, v, l.Latest()))
		case v > l.Latest():
			ahead = append(ahead, fmt.Sprintf("%s at %d, this binary knows %d", l.Name, v, l.Latest()))
		}
	}
	switch {
	case len(ahead) > 0:
		return fmt.Errorf("database schema is newer than this binary (%s): upgrade strata", strings.Join(ahead, "; "))
	case len(behind) > 0:
		return fmt.Errorf("%w (%s)", ErrSchemaBehind, strings.Join(behind, "; "))
	}
	return nil
}

func withMigrationConn(ctx context.Context, url string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLockID)); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrateLockID)) //nolint:errcheck
	if err := bootstrap(ctx, conn); err != nil {
		return err
	}
	return fn(conn)
}

func readApplied(ctx context.Context, conn *pgx.Conn) (map[appliedKey]appliedRow, error) {
	rows, err := conn.Query(ctx, `SELECT line, version, applied_at, checksum, adopted FROM strata.schema_migrations`)
	if err != nil {
		return nil, err
	}
	out := map[appliedKey]appliedRow{}
	for rows.Next() {
		var k appliedKey
		var r appliedRow
		if err := rows.Scan(&k.line, &k.version, &r.at, &r.checksum, &r.adopted); err != nil {
			return nil, err
		}
		out[k] = r
	}
	return out, rows.Err()
}

// appliedMigrations reads what is applied and refuses a database ahead of
// this binary in any of its lines. A line the binary does not know (a
// module no longer listed) is left alone.
func appliedMigrations(ctx context.Context, conn *pgx.Conn, all []Line) (map[appliedKey]appliedRow, error) {
	applied, err := readApplied(ctx, conn)
	if err != nil {
		return nil, err
	}
	latest := map[string]int{}
	for _, l := range all {
		latest[l.Name] = l.Latest()
	}
	for k := range applied {
		if n, ok := latest[k.line]; ok && k.version > n {
			return nil, fmt.Errorf("database schema line %s is at version %d, newer than this binary (%d): upgrade strata", k.line, k.version, n)
		}
	}
	return applied, nil
}

// bootstrap creates the roles, the schema and the migrations table when
// they are missing. Roles are cluster-wide, so two databases of one cluster
// may race to create them; the loser's duplicate error is ignored.
func bootstrap(ctx context.Context, conn *pgx.Conn) error {
	var super bool
	if err := conn.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		return fmt.Errorf("inspect login role: %w", err)
	}
	for _, role := range []string{RoleOwner, RoleApp, RoleProjector, RoleEraser} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			_, err := conn.Exec(ctx, "CREATE ROLE "+role+" NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE")
			if err != nil && SQLState(err) != "42710" && SQLState(err) != "23505" {
				return fmt.Errorf("create role %s (the login role needs CREATEROLE, or an operator creates the roles; see docs/operations.md): %w", role, err)
			}
		}
		if !super {
			var member bool
			if err := conn.QueryRow(ctx, `SELECT pg_has_role(current_user, $1, 'MEMBER')`, role).Scan(&member); err != nil {
				return err
			}
			if !member {
				if _, err := conn.Exec(ctx, "GRANT "+role+" TO CURRENT_USER"); err != nil {
					return fmt.Errorf("grant %s to the login role: %w", role, err)
				}
			}
		}
	}
	stmts := []string{
		`CREATE SCHEMA IF NOT EXISTS ` + Schema + ` AUTHORIZATION ` + RoleOwner,
		`GRANT USAGE ON SCHEMA ` + Schema + ` TO ` + RoleApp + `, ` + RoleProjector,
		`SET ROLE ` + RoleOwner,
		`CREATE TABLE IF NOT EXISTS ` + Schema + `.schema_migrations (
			version    int PRIMARY KEY,
			name       text NOT NULL,
			checksum   text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`,
		// Migration lines (engine and modules) arrived after the table:
		// rows of a database migrated before belong to the engine's line.
		`ALTER TABLE ` + Schema + `.schema_migrations ADD COLUMN IF NOT EXISTS line text NOT NULL DEFAULT '` + EngineLineName + `'`,
		`ALTER TABLE ` + Schema + `.schema_migrations ADD COLUMN IF NOT EXISTS adopted boolean NOT NULL DEFAULT false`,
		`DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
			               WHERE i.indrelid = '` + Schema + `.schema_migrations'::regclass AND i.indisprimary AND a.attname = 'line') THEN
				ALTER TABLE ` + Schema + `.schema_migrations DROP CONSTRAINT schema_migrations_pkey;
				ALTER TABLE ` + Schema + `.schema_migrations ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (line, version);
			END IF;
		END $$`,
		`GRANT SELECT ON ` + Schema + `.schema_migrations TO ` + RoleApp + `, ` + RoleProjector,
		`RESET ROLE`,
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			if SQLState(err) == "42P06" || SQLState(err) == "23505" { // schema created concurrently
				continue
			}
			return fmt.Errorf("bootstrap schema: %w", err)
		}
	}
	return nil
}

// ErrSchemaBehind is returned by Check when migrations are pending.
var ErrSchemaBehind = errors.New("database schema is behind this binary: run `strata migrate up`")
