package db

// Roles and schema. Roles are cluster-wide; every strata database in a
// cluster shares them. None of them can log in: a login role (the user in
// DATABASE_URL) is granted membership and each pooled connection switches
// to the role it needs with SET ROLE, so the effective role of every query
// is one that owns nothing and has neither SUPERUSER nor BYPASSRLS.
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
)

// TenantSetting is the transaction-local setting RLS policies read.
const TenantSetting = "app.tenant_id"
