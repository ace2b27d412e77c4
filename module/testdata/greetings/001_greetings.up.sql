-- The greetings example module's read model (module's ExampleModule): one
-- row per name greeted, a tenant table by every rule of the engine
-- (ARCHITECTURE decision 3).
CREATE TABLE greetings (
    tenant_id  text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    who        text        COLLATE "C" NOT NULL,
    greeted    bigint      NOT NULL CHECK (greeted > 0),
    updated_at timestamptz NOT NULL,
    CONSTRAINT greetings_pkey PRIMARY KEY (tenant_id, who)
);

ALTER TABLE greetings ENABLE ROW LEVEL SECURITY;
ALTER TABLE greetings FORCE ROW LEVEL SECURITY;
CREATE POLICY greetings_app ON greetings FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY greetings_projector ON greetings TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT ON greetings TO strata_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON greetings TO strata_projector;
