-- The loyalty module's read model: one row per customer's account
-- (projection loyalty_balances). A tenant table by every rule of the
-- engine (ARCHITECTURE decision 3): tenant_id NOT NULL with the tenant
-- pattern, RLS enabled and forced, policies on app.tenant_id with USING and
-- WITH CHECK, a key that starts with tenant_id, explicit grants.
CREATE TABLE loyalty_balances (
    tenant_id   text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    customer_id text        COLLATE "C" NOT NULL,
    balance     bigint      NOT NULL CHECK (balance >= 0),
    earned      bigint      NOT NULL CHECK (earned >= 0),
    redeemed    bigint      NOT NULL CHECK (redeemed >= 0),
    version     bigint      NOT NULL CHECK (version > 0),
    updated_at  timestamptz NOT NULL,
    CONSTRAINT loyalty_balances_pkey PRIMARY KEY (tenant_id, customer_id)
);

ALTER TABLE loyalty_balances ENABLE ROW LEVEL SECURITY;
ALTER TABLE loyalty_balances FORCE ROW LEVEL SECURITY;
CREATE POLICY loyalty_balances_app ON loyalty_balances FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY loyalty_balances_projector ON loyalty_balances TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT ON loyalty_balances TO strata_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON loyalty_balances TO strata_projector;
