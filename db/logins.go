package db

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Login is a login role a serving pool connects as, and the one serving
// role (RoleApp or RoleProjector) it may switch to.
type Login struct {
	// Role is RoleApp or RoleProjector.
	Role string
	// URL connects as the login role. Its password, when it has one, is
	// the login's password.
	URL string
	// Pooled: the URL goes through a transaction-mode pooler, so the
	// login's sessions must start as Role in strata's search_path by
	// themselves (pooler.go): EnsureLogins sets the login's defaults.
	Pooled bool
}

// LoginURL returns base (a URL or a keyword/value connection string) with
// its user replaced by user and no password: the URL of a login strata
// provisions itself (LoginApp, LoginProjector), which has no password and
// so can log in only where the server trusts the connection without one
// (the embedded cluster, test clusters, a local trust or peer rule).
func LoginURL(base, user string) (string, error) {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err != nil {
			return "", errors.New("parse database url: invalid connection string")
		}
		// An explicit empty password keeps pgx from taking PGPASSWORD,
		// which belongs to base's user, for this one.
		u.User = url.UserPassword(user, "")
		return u.String(), nil
	}
	if _, err := pgx.ParseConfig(base); err != nil {
		return "", errors.New("parse database url: invalid connection string")
	}
	// Later keywords win in a keyword/value string.
	return base + " user='" + strings.ReplaceAll(user, "'", `\'`) + "' password=''", nil
}

// loginUser returns the user and password of a serving URL.
func loginUser(raw string) (user, password string, err error) {
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return "", "", errors.New("parse database url: invalid connection string")
	}
	return cfg.User, cfg.Password, nil
}

// EnsureLogins creates the login roles of logins that do not exist yet and
// grants each its serving role, connecting with ownerURL (a superuser or a
// CREATEROLE login, as on the first `strata migrate up`). A new login is
// LOGIN NOINHERIT and has no attribute that could escalate (roles.go says
// why); its password is the URL's, sent as a SCRAM-SHA-256 verifier so
// the password itself never reaches the server's logs. An existing login
// whose URL has a password gets that password, so the URL stays the one
// place it is kept. It refuses to grant a serving role to a login that is
// privileged: CheckServing would refuse it anyway.
func EnsureLogins(ctx context.Context, ownerURL string, logins []Login, logf Logf) error {
	conn, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var errs []error
	for _, l := range logins {
		if err := ensureLogin(ctx, conn, l, logf); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func ensureLogin(ctx context.Context, conn *pgx.Conn, l Login, logf Logf) error {
	if l.Role != RoleApp && l.Role != RoleProjector {
		return fmt.Errorf("login for %q: want %s or %s", l.Role, RoleApp, RoleProjector)
	}
	user, password, err := loginUser(l.URL)
	if err != nil {
		return err
	}
	if user == "" {
		return fmt.Errorf("the URL of the %s login names no user", l.Role)
	}
	var exists, privileged bool
	if err := conn.QueryRow(ctx, `SELECT count(*) > 0, coalesce(bool_or(rolsuper OR rolbypassrls OR rolcreaterole OR rolreplication), false)
FROM pg_roles WHERE rolname = $1`, user).Scan(&exists, &privileged); err != nil {
		return fmt.Errorf("inspect login %s: %w", user, err)
	}
	name := pgx.Identifier{user}.Sanitize()
	secret := ""
	if password != "" {
		v, err := scramVerifier(password)
		if err != nil {
			return fmt.Errorf("login %s: %w", user, err)
		}
		secret = " PASSWORD '" + v + "'" // base64 and digits only: nothing to escape
	}
	switch {
	case !exists:
		_, err := conn.Exec(ctx, "CREATE ROLE "+name+" LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"+secret)
		if err != nil && SQLState(err) != "42710" { // created concurrently
			return fmt.Errorf("create login role %s (the login of DATABASE_URL needs CREATEROLE, or an operator creates it): %w", user, err)
		}
		logf.printf("created login role %s for %s", user, l.Role)
	case privileged:
		return fmt.Errorf("login role %s is superuser, BYPASSRLS, CREATEROLE or REPLICATION: serving sessions must not log in as it; name another user in the URL of the %s login", user, l.Role)
	case secret != "":
		if _, err := conn.Exec(ctx, "ALTER ROLE "+name+secret); err != nil {
			return fmt.Errorf("set the password of login role %s: %w", user, err)
		}
	}
	var member bool
	if err := conn.QueryRow(ctx, `SELECT pg_has_role($1, $2, 'MEMBER')`, user, l.Role).Scan(&member); err != nil {
		return fmt.Errorf("inspect login %s: %w", user, err)
	}
	if !member {
		if _, err := conn.Exec(ctx, "GRANT "+l.Role+" TO "+name); err != nil {
			return fmt.Errorf("grant %s to login role %s: %w", l.Role, user, err)
		}
	}
	if l.Pooled {
		return setLoginDefaults(ctx, conn, user, l.Role)
	}
	return nil
}

// scramIterations is PostgreSQL's default (scram_iterations).
const scramIterations = 4096

// scramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password (RFC 5802, RFC 7677), as `\password` computes it client-side.
// PostgreSQL normalizes passwords with SASLprep, which leaves printable
// ASCII as it is; other passwords are refused rather than risk a verifier
// that does not match what clients send.
func scramVerifier(password string) (string, error) {
	var salt [16]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return "", err
	}
	return scramVerifierSalt(password, salt[:], scramIterations)
}

func scramVerifierSalt(password string, salt []byte, iterations int) (string, error) {
	for _, r := range password {
		if r < 0x20 || r > 0x7e {
			return "", errors.New("the password must be printable ASCII for strata to set it (or create the login yourself)")
		}
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(msg))
		return h.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	server := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(server)), nil
}

// EscalationError says why a serving login could leave the confinement of
// its serving role. Findings are sentences about the login and its role.
type EscalationError struct {
	Login    string // the session user
	Role     string // RoleApp or RoleProjector
	Findings []string
}

func (e *EscalationError) Error() string {
	return fmt.Sprintf("the %s login %s can escalate: %s", e.Role, e.Login, strings.Join(e.Findings, "; "))
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckServing verifies, on a session of a serving pool, that its login
// (the session user, whatever SET ROLE did since) cannot leave role:
//
//   - neither the login nor role is superuser, BYPASSRLS, CREATEROLE (which
//     could grant itself strata_owner) or REPLICATION (logical decoding
//     reads every tenant's changes through SQL);
//   - the only role the login can SET ROLE to is role, and role can SET
//     ROLE to none: memberships are followed through every chain, so
//     strata_owner, the other serving role, pg_read_server_files,
//     pg_execute_server_program, pg_read_all_data, pg_database_owner (the
//     database's owner), ... all count;
//   - neither owns anything (a table's owner may turn its row-level
//     security off; a database's owner may change its settings).
//
// It returns an *EscalationError listing what it found, or the error of a
// query that failed.
func CheckServing(ctx context.Context, q Querier, role string) error {
	var login string
	if err := q.QueryRow(ctx, `SELECT session_user::text`).Scan(&login); err != nil {
		return fmt.Errorf("inspect the serving login: %w", err)
	}
	e := &EscalationError{Login: login, Role: role}
	for _, r := range []string{login, role} {
		var super, bypass, createrole, replication, found bool
		err := q.QueryRow(ctx, `SELECT rolsuper, rolbypassrls, rolcreaterole, rolreplication, true FROM pg_roles WHERE rolname = $1`, r).
			Scan(&super, &bypass, &createrole, &replication, &found)
		if errors.Is(err, pgx.ErrNoRows) {
			e.Findings = append(e.Findings, "role "+r+" does not exist (run `strata migrate up`)")
			continue
		}
		if err != nil {
			return fmt.Errorf("inspect role %s: %w", r, err)
		}
		for _, a := range []struct {
			on   bool
			what string
		}{{super, "a superuser"}, {bypass, "BYPASSRLS"}, {createrole, "CREATEROLE"}, {replication, "REPLICATION"}} {
			if a.on {
				e.Findings = append(e.Findings, r+" is "+a.what)
			}
		}
		if r == role && r == login {
			break // the login is the serving role itself (an operator's choice): checked once
		}
	}
	rows, err := q.Query(ctx, `SELECT m.rolname FROM pg_roles m
WHERE pg_has_role(session_user, m.oid, 'MEMBER') AND m.rolname NOT IN (session_user, $1) ORDER BY 1`, role)
	if err != nil {
		return fmt.Errorf("inspect the memberships of %s: %w", login, err)
	}
	extra, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("inspect the memberships of %s: %w", login, err)
	}
	if len(extra) > 0 {
		list := strings.Join(extra, ", ")
		if len(extra) > 6 {
			list = fmt.Sprintf("%s and %d more", strings.Join(extra[:6], ", "), len(extra)-6)
		}
		e.Findings = append(e.Findings, fmt.Sprintf("%s can SET ROLE to %s (it may be a member of %s only)", login, list, role))
	}
	var member bool
	if err := q.QueryRow(ctx, `SELECT pg_has_role(session_user, $1, 'MEMBER')`, role).Scan(&member); err != nil {
		return fmt.Errorf("inspect the memberships of %s: %w", login, err)
	}
	if !member && login != role {
		e.Findings = append(e.Findings, login+" is not a member of "+role+" (run `strata migrate up` with the serving URLs set, or GRANT "+role+" TO "+login+")")
	}
	// Ownership of anything in the cluster: pg_shdepend records the owner
	// of every object of every database (and of databases themselves).
	rows, err = q.Query(ctx, `SELECT r.rolname,
       count(*) AS n,
       min(CASE WHEN d.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) OR d.dbid = 0
                THEN pg_describe_object(d.classid, d.objid, d.objsubid) END) AS example
FROM pg_shdepend d JOIN pg_roles r ON r.oid = d.refobjid
WHERE d.deptype = 'o' AND d.refclassid = 'pg_authid'::regclass AND r.rolname IN (session_user, $1)
GROUP BY r.rolname ORDER BY 1`, role)
	if err != nil {
		return fmt.Errorf("inspect what %s owns: %w", login, err)
	}
	for rows.Next() {
		var who string
		var n int64
		var example *string
		if err := rows.Scan(&who, &n, &example); err != nil {
			rows.Close()
			return fmt.Errorf("inspect what %s owns: %w", login, err)
		}
		what := fmt.Sprintf("%s owns %d objects", who, n)
		if example != nil {
			what += " (" + *example + ")"
		}
		e.Findings = append(e.Findings, what)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("inspect what %s owns: %w", login, err)
	}
	if len(e.Findings) > 0 {
		return e
	}
	return nil
}
