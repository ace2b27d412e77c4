package db

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// migrated returns a migrated database's superuser URL.
func migrated(t *testing.T) string {
	t.Helper()
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Up(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	return url
}

var roleSeq atomic.Int64

// uniqueRole names a role of this test only (roles are cluster-wide) and
// drops it when the test ends.
func uniqueRole(t *testing.T, admin *pgx.Conn, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1_000_000, roleSeq.Add(1))
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+name)
		_, _ = admin.Exec(ctx, "DROP ROLE IF EXISTS "+name)
	})
	return name
}

// TestScramVerifierMatchesPostgres: the verifier strata sends for a
// login's password is the one PostgreSQL computes from the password
// itself (same salt and iterations), so a client logging in with the
// password is accepted.
func TestScramVerifierMatchesPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role := uniqueRole(t, admin, "t_scram")
	const password = `s3cret-With punctuation!"'\`
	if _, err := admin.Exec(ctx, "SET password_encryption = 'scram-sha-256'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD "+quoteLiteral(password)); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := admin.QueryRow(ctx, `SELECT rolpassword FROM pg_authid WHERE rolname = $1`, role).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	// SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
	var iterations int
	var salt64 string
	head, _, _ := strings.Cut(strings.TrimPrefix(stored, "SCRAM-SHA-256$"), "$")
	if _, err := fmt.Sscanf(strings.Replace(head, ":", " ", 1), "%d %s", &iterations, &salt64); err != nil {
		t.Fatalf("verifier %q: %v", stored, err)
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil {
		t.Fatal(err)
	}
	got, err := scramVerifierSalt(password, salt, iterations)
	if err != nil {
		t.Fatal(err)
	}
	if got != stored {
		t.Errorf("verifier\n got %s\nwant %s", got, stored)
	}
	if _, err := scramVerifier("pässword"); err == nil {
		t.Error("a non-ASCII password was accepted: its verifier may not match SASLprep")
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TestCheckServing: every way a serving login could leave its role is
// found, and a login made by EnsureLogins passes.
func TestCheckServing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := migrated(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())

	check := func(t *testing.T, login, role string) error {
		t.Helper()
		u, err := LoginURL(url, login)
		if err != nil {
			t.Fatal(err)
		}
		pool, err := OpenPool(ctx, u, PoolConfig{Role: role, MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		return CheckServing(ctx, pool, role)
	}
	clean := func(t *testing.T, role string) string {
		t.Helper()
		login := uniqueRole(t, admin, "t_login")
		if err := EnsureLogins(ctx, url, []Login{{Role: role, URL: must(LoginURL(url, login))}}, nil); err != nil {
			t.Fatal(err)
		}
		return login
	}
	t.Run("provisioned", func(t *testing.T) {
		for _, role := range []string{RoleApp, RoleProjector} {
			if err := check(t, clean(t, role), role); err != nil {
				t.Errorf("a login made by EnsureLogins for %s: %v", role, err)
			}
		}
	})
	for _, c := range []struct {
		name  string
		setup string // %s is the login
		want  string
	}{
		{"superuser", "ALTER ROLE %s SUPERUSER", "is a superuser"},
		{"bypassrls", "ALTER ROLE %s BYPASSRLS", "is BYPASSRLS"},
		{"createrole", "ALTER ROLE %s CREATEROLE", "is CREATEROLE"},
		{"replication", "ALTER ROLE %s REPLICATION", "is REPLICATION"},
		{"owner member", "GRANT " + RoleOwner + " TO %s", "can SET ROLE to " + RoleOwner},
		{"other serving role", "GRANT " + RoleProjector + " TO %s", "can SET ROLE to " + RoleProjector},
		{"predefined role", "GRANT pg_read_server_files TO %s", "can SET ROLE to pg_read_server_files"},
		{"read all data", "GRANT pg_read_all_data TO %s", "can SET ROLE to pg_read_all_data"},
		{"owns a table", "CREATE TABLE public.%[1]s_t (x int); ALTER TABLE public.%[1]s_t OWNER TO %[1]s", "owns 1 objects (table public."},
	} {
		t.Run(c.name, func(t *testing.T) {
			login := clean(t, RoleApp)
			for _, stmt := range strings.Split(fmt.Sprintf(c.setup, login), "; ") {
				if _, err := admin.Exec(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			err := check(t, login, RoleApp)
			var esc *EscalationError
			if !errors.As(err, &esc) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("CheckServing = %v, want an EscalationError saying %q", err, c.want)
			}
		})
	}
	t.Run("serving role itself privileged", func(t *testing.T) {
		// strata_app is shared by the cluster's tests: look at a copy of the
		// check instead, through a login whose "serving role" is a role of
		// this test that is a member of strata_owner.
		login := uniqueRole(t, admin, "t_login")
		role := uniqueRole(t, admin, "t_role")
		for _, stmt := range []string{"CREATE ROLE " + role, "GRANT " + RoleOwner + " TO " + role, "CREATE ROLE " + login + " LOGIN NOINHERIT", "GRANT " + role + " TO " + login} {
			if _, err := admin.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		u := must(LoginURL(url, login))
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := CheckServing(ctx, conn, role); err == nil || !strings.Contains(err.Error(), "can SET ROLE to "+RoleOwner) {
			t.Errorf("CheckServing = %v, want the chain through %s to %s", err, role, RoleOwner)
		}
	})
	t.Run("refuses to provision a privileged login", func(t *testing.T) {
		login := uniqueRole(t, admin, "t_login")
		if _, err := admin.Exec(ctx, "CREATE ROLE "+login+" LOGIN SUPERUSER"); err != nil {
			t.Fatal(err)
		}
		err := EnsureLogins(ctx, url, []Login{{Role: RoleApp, URL: must(LoginURL(url, login))}}, nil)
		if err == nil || !strings.Contains(err.Error(), "superuser") {
			t.Errorf("EnsureLogins for a superuser login = %v", err)
		}
		var member bool
		if err := admin.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'MEMBER') AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = $1)`, login, RoleApp).Scan(&member); err != nil || member {
			t.Errorf("the superuser login was granted %s (%v)", RoleApp, err)
		}
	})
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

// TestLoginURL keeps the host and database and drops the password, in
// both connection-string forms.
func TestLoginURL(t *testing.T) {
	for _, base := range []string{
		"postgres://owner:secret@db.example:5433/strata?sslmode=require",
		"host=db.example port=5433 dbname=strata user=owner password=secret sslmode=require",
	} {
		u, err := LoginURL(base, LoginApp)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		if cfg.User != LoginApp || cfg.Password != "" || cfg.Host != "db.example" || cfg.Port != 5433 || cfg.Database != "strata" || cfg.TLSConfig == nil {
			t.Errorf("LoginURL(%q) = %q: user %q password %q host %q port %d db %q", base, u, cfg.User, cfg.Password, cfg.Host, cfg.Port, cfg.Database)
		}
	}
}

// TestLoginURLKeepsEveryHost: a DATABASE_URL naming every member of a
// Patroni cluster, with target_session_attrs, gives serving logins that
// name the same members and ask for the same kind of session, in both
// connection-string forms (docs/operations.md, "Failover").
func TestLoginURLKeepsEveryHost(t *testing.T) {
	for _, base := range []string{
		"postgres://owner:secret@db1:5432,db2:5433,db3:5434/strata?target_session_attrs=read-write&connect_timeout=5",
		"host=db1,db2,db3 port=5432,5433,5434 dbname=strata user=owner password=secret target_session_attrs=read-write connect_timeout=5",
	} {
		u, err := LoginURL(base, LoginProjector)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		hosts := []string{fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)}
		for _, f := range cfg.Fallbacks {
			if h := fmt.Sprintf("%s:%d", f.Host, f.Port); !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
		if want := []string{"db1:5432", "db2:5433", "db3:5434"}; !slices.Equal(hosts, want) {
			t.Errorf("LoginURL(%q) = %q: hosts %v, want %v", base, u, hosts, want)
		}
		if cfg.User != LoginProjector || cfg.Password != "" || cfg.Database != "strata" || cfg.ConnectTimeout != 5*time.Second {
			t.Errorf("LoginURL(%q) = %q: user %q password %q db %q connect timeout %s", base, u, cfg.User, cfg.Password, cfg.Database, cfg.ConnectTimeout)
		}
		// target_session_attrs=read-write: pgx validates each session.
		if cfg.ValidateConnect == nil {
			t.Errorf("LoginURL(%q) = %q: target_session_attrs lost", base, u)
		}
	}
}
