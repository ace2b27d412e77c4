-- The engine's read side: projection checkpoints and the audit trail of
-- cross-tenant admin reads. (Until modules existed this migration also
-- created the orders module's read models; they are that module's line
-- now, projections/orders/migrations, which adopts them on databases this
-- migration's first version created.)
--
-- Rules every tenant table follows, here and in every module's line (ARCHITECTURE decision 3, checked
-- by readmodels' catalog test for every table of the schema that has a
-- tenant_id column):
--   * tenant_id NOT NULL with the tenant pattern CHECK;
--   * ENABLE and FORCE ROW LEVEL SECURITY;
--   * policies on current_setting('app.tenant_id', true): strata_app may
--     SELECT its tenant's rows, strata_projector may do anything to its
--     transaction's tenant's rows (USING and WITH CHECK);
--   * every unique key starts with tenant_id (a unique key without it would
--     be an existence oracle across tenants);
--   * explicit GRANTs; nobody gets TRUNCATE (it ignores RLS).
-- Read-model timestamps come from the events, never from now(), so that a
-- rebuild reproduces the rows exactly. Tables whose rows are updated in
-- place keep 15% of each page free (fillfactor 85), so that an update of
-- unindexed columns can stay on its page (a HOT update, no index writes).

-- One row per projection (ARCHITECTURE decision 2): the position of the
-- last event applied, committed in the same transaction as the read-model
-- writes of that event. Global, hence no tenant_id: positions say nothing
-- about any tenant's data. Both numbers of event.Position are kept
-- (PostgreSQL: xid8 and row identity; EventStoreDB: commit and prepare).
CREATE TABLE projection_checkpoints (
    projection text          PRIMARY KEY CHECK (projection ~ '^[a-z][a-z0-9_]{0,62}$'),
    pos_major  numeric(20,0) NOT NULL DEFAULT 0 CHECK (pos_major >= 0),
    pos_minor  numeric(20,0) NOT NULL DEFAULT 0 CHECK (pos_minor >= 0),
    -- What the active runner last reported. "running" with no runner
    -- holding the projection's advisory lock means the runner died.
    status     text          NOT NULL DEFAULT 'stopped' CHECK (status IN ('running', 'error', 'stopped')),
    last_error text,
    error_at   timestamptz,
    updated_at timestamptz   NOT NULL DEFAULT now()
);
GRANT SELECT ON projection_checkpoints TO strata_app;
GRANT SELECT, INSERT, UPDATE ON projection_checkpoints TO strata_projector;

-- Who looked at every tenant's state through a cross_tenant admin token,
-- when, and at what. The row belongs to the caller's own tenant (the one in
-- the token), so it obeys the same rules as every tenant table; it is
-- append-only for the application role (no UPDATE or DELETE grant).
CREATE TABLE admin_audit (
    tenant_id  text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    subject    text        NOT NULL,
    action     text        NOT NULL,
    target     text        NOT NULL,
    request_id text,
    at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT admin_audit_pkey PRIMARY KEY (tenant_id, id)
);
ALTER TABLE admin_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE admin_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY admin_audit_app ON admin_audit TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT ON admin_audit TO strata_app;
