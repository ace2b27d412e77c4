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
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered schema change, embedded in the binary.
type Migration struct {
	Version  int
	Name     string
	Up, Down string
	Checksum string // sha256 of Up
}

var migrationName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// Migrations returns the embedded migrations in version order.
func Migrations() []Migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded at build time
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			panic("db: badly named migration " + e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			panic(err)
		}
		mg := byVersion[v]
		if mg == nil {
			mg = &Migration{Version: v, Name: m[2]}
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
			panic(fmt.Sprintf("db: migration %03d has no up file", m.Version))
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			panic(fmt.Sprintf("db: migration versions must be contiguous from 1; found %03d", m.Version))
		}
	}
	return out
}

// LatestVersion is the schema version this binary expects.
func LatestVersion() int { return len(Migrations()) }

// MigrationStatus is one row of `strata migrate status`.
type MigrationStatus struct {
	Version   int
	Name      string
	AppliedAt time.Time // zero when pending
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

// Up applies every pending migration. url must connect as a role that may
// create roles and schemas (or for which an operator has created them, see
// docs/operations.md); each migration runs in its own transaction as
// RoleOwner, so the objects it creates are owned by that role, not by the
// login role and never by the application roles.
func Up(ctx context.Context, url string, logf Logf) error {
	return withMigrationConn(ctx, url, func(conn *pgx.Conn) error {
		applied, err := appliedVersions(ctx, conn)
		if err != nil {
			return err
		}
		pending := 0
		for _, m := range Migrations() {
			if _, ok := applied[m.Version]; ok {
				continue
			}
			pending++
			start := time.Now()
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+RoleOwner); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+Schema); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, m.Up); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)`,
					m.Version, m.Name, m.Checksum)
				return err
			})
			if err != nil {
				return fmt.Errorf("migration %03d_%s: %w", m.Version, m.Name, err)
			}
			logf.printf("applied migration %03d_%s in %s", m.Version, m.Name, time.Since(start).Round(time.Millisecond))
		}
		if pending == 0 {
			logf.printf("schema is up to date (version %d)", LatestVersion())
		}
		return nil
	})
}

// Down reverts the newest steps applied migrations.
func Down(ctx context.Context, url string, steps int, logf Logf) error {
	return withMigrationConn(ctx, url, func(conn *pgx.Conn) error {
		all := Migrations()
		for i := 0; i < steps; i++ {
			var v int
			err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM strata.schema_migrations`).Scan(&v)
			if err != nil {
				return err
			}
			if v == 0 {
				logf.printf("nothing to revert")
				return nil
			}
			if v > len(all) {
				return fmt.Errorf("database is at version %d, newer than this binary (%d): revert with the binary that applied it", v, len(all))
			}
			m := all[v-1]
			if m.Down == "" {
				return fmt.Errorf("migration %03d_%s has no down file", m.Version, m.Name)
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
				_, err := tx.Exec(ctx, `DELETE FROM strata.schema_migrations WHERE version = $1`, m.Version)
				return err
			})
			if err != nil {
				return fmt.Errorf("revert %03d_%s: %w", m.Version, m.Name, err)
			}
			logf.printf("reverted migration %03d_%s", m.Version, m.Name)
		}
		return nil
	})
}

// Status lists every known migration and whether it is applied.
func Status(ctx context.Context, url string) ([]MigrationStatus, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	type row struct {
		at  time.Time
		sum string
	}
	applied := map[int]row{}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('strata.schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, err
	}
	if exists {
		rows, err := conn.Query(ctx, `SELECT version, applied_at, checksum FROM strata.schema_migrations`)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var v int
			var r row
			if err := rows.Scan(&v, &r.at, &r.sum); err != nil {
				return nil, err
			}
			applied[v] = r
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	var out []MigrationStatus
	for _, m := range Migrations() {
		st := MigrationStatus{Version: m.Version, Name: m.Name}
		if r, ok := applied[m.Version]; ok {
			st.AppliedAt = r.at
			st.Modified = r.sum != m.Checksum
		}
		out = append(out, st)
	}
	return out, nil
}

// CurrentVersion returns the newest applied migration (0 if none) using
// an existing connection of any strata role.
func CurrentVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM strata.schema_migrations`).Scan(&v)
	return v, err
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

func appliedVersions(ctx context.Context, conn *pgx.Conn) (map[int]string, error) {
	rows, err := conn.Query(ctx, `SELECT version, checksum FROM strata.schema_migrations`)
	if err != nil {
		return nil, err
	}
	out := map[int]string{}
	for rows.Next() {
		var v int
		var sum string
		if err := rows.Scan(&v, &sum); err != nil {
			return nil, err
		}
		out[v] = sum
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for v := range out {
		if v > LatestVersion() {
			return nil, fmt.Errorf("database schema is at version %d, newer than this binary (%d): upgrade strata", v, LatestVersion())
		}
	}
	return out, nil
}

// bootstrap creates the roles, the schema and the migrations table when
// they are missing. Roles are cluster-wide, so two databases of one cluster
// may race to create them; the loser's duplicate error is ignored.
func bootstrap(ctx context.Context, conn *pgx.Conn) error {
	var super bool
	if err := conn.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil {
		return fmt.Errorf("inspect login role: %w", err)
	}
	for _, role := range []string{RoleOwner, RoleApp, RoleProjector} {
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

// ErrSchemaBehind is returned by CheckVersion when migrations are pending.
var ErrSchemaBehind = errors.New("database schema is behind this binary: run `strata migrate up`")
