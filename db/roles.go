package db

// Roles and schema. Roles are cluster-wide; every strata database in a
// cluster shares them.
//
// Three roles cannot log in: strata_owner owns every object, strata_app
// and strata_projector hold the grants of the serving processes. Serving
// pools log in as login roles of their own (ARCHITECTURE decision 11:
// serving sessions cannot escalate), by default LoginApp and
// LoginProjector, each a member of exactly one serving role, and every
// pooled connection switches to that role with SET ROLE.
//
// Why separate login roles rather than LOGIN serving roles: the serving
// roles are what grants and policies name, the logins are credentials. An
// operator can bring logins of their own (STRATA_APP_DATABASE_URL,
// STRATA_PROJECTOR_DATABASE_URL), several per serving role, and rotate
// one without touching a grant; strata only checks what each can reach.
//
// Why NOINHERIT: a provisioned login has no privilege of its own and
// reaches its serving role's only through SET ROLE, which the pool does
// after connecting. A session that runs RESET ROLE is then the bare login:
// it can read no table at all (permission denied), which is stricter than
// INHERIT (the serving role's rights without the SET ROLE) though either
// would be confined by row-level security. A login an operator creates
// with INHERIT passes the checks too.
//
// What a serving session can and cannot do (CheckServing verifies it when
// serve starts and on every /readyz):
//
//   - RESET ROLE returns to the login; SET ROLE reaches the one serving
//     role and nothing else: the login is a member of that role only (no
//     strata_owner, no other serving role, no predefined role such as
//     pg_read_all_data or pg_read_server_files, not the database's owner),
//     and the serving role is a member of nothing. The app login may not
//     reach strata_projector, which reads every tenant's events; the
//     projector login may not reach strata_app, which appends events.
//   - SET SESSION AUTHORIZATION needs a superuser session user: refused.
//   - Neither the login nor its serving role is superuser, BYPASSRLS,
//     CREATEROLE or REPLICATION, and neither owns anything, so none can
//     turn row-level security off, grant itself a role or read the WAL.
//   - set_config('app.tenant_id', ...) is allowed, by design: it is how
//     every transaction names its tenant. The application role is confined
//     to a tenant by that setting only, so the tenant boundary of the
//     command and query APIs is the code path from the verified token to
//     the setting (auth.Verifier -> domain.NewContext -> WithTenantTx ->
//     SetTenant), not the database login. What the database guarantees
//     against a session that runs arbitrary SQL is that it stays the
//     serving role under row-level security: it cannot become an owner, a
//     superuser or a BYPASSRLS role, so it cannot switch the policies off,
//     and a session that sets no tenant sees no tenant's rows.
//   - A session may change its own password (PostgreSQL allows every role
//     that) and its own defaults of ordinary settings; it cannot set
//     app.tenant_id as a default (a placeholder setting needs a superuser),
//     and the pool sets search_path at connect time, which wins over a
//     role default.
//
// Through a transaction-mode pooler (pooler.go) the app login gets the
// role and search_path as its role defaults instead of a SET after
// connecting: RESET ROLE then returns to strata_app, SET ROLE NONE to the
// bare login; the rest above holds unchanged.
//
// DDL (migrations, a rebuild's shadow tables and swaps) runs on the owner
// connection (DATABASE_URL), never on a serving pool.
const (
	// Schema holds every strata table.
	Schema = "strata"
	// RoleOwner owns the schema and all tables; only migrations run as it.
	RoleOwner = "strata_owner"
	// RoleApp serves commands and queries. Row-level security confines it
	// to the tenant set in the current transaction.
	RoleApp = "strata_app"
	// RoleProjector runs projections. It reads the global log of every
	// tenant through one explicitly named policy (events_projector_read_all)
	// and writes read models under the tenant of each event.
	RoleProjector = "strata_projector"
	// LoginApp and LoginProjector are the login roles strata provisions
	// when no serving URL is configured: LOGIN NOINHERIT, no password (they
	// log in only where the server trusts the connection, as the embedded
	// cluster does on loopback), members of RoleApp and RoleProjector.
	LoginApp       = "strata_app_login"
	LoginProjector = "strata_projector_login"
)

// TenantSetting is the transaction-local setting RLS policies read.
const TenantSetting = "app.tenant_id"
