-- Export jobs of the platform API (docs/tenants.md, "Export and import";
-- internal/tenancy/portability/jobs.go).
--
-- Control-plane tables like tenant_audit: they name a tenant in `tenant`,
-- not `tenant_id`, have no row-level security and no grant to the serving
-- roles: only the owner connection (the platform path, as strata_owner)
-- reads and writes them. They are in readmodels/catalog_test.go's
-- globalTables. Keeping the state and the archive here, not in a process's
-- memory or disk, lets any serving process with the owner connection
-- answer a job's status and serve its archive, whichever process ran it.
--
-- A job is run by the process that accepted it; heartbeat_at is refreshed
-- while it runs, and a reader shows a running job whose heartbeat is older
-- than 30 s as failed (its process stopped). Nothing resumes it.
CREATE TABLE tenant_exports (
    id           uuid        PRIMARY KEY,
    tenant       text        NOT NULL CHECK (tenant ~ '^[a-z0-9-]{1,63}$'),
    status       text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'failed')),
    requested_by text        NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 300),
    progress     jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(progress) = 'object'),
    manifest     jsonb,                 -- the archive's manifest, once done
    error        text,                  -- a failed job's message (never a database's text)
    bytes        bigint      NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    CONSTRAINT tenant_exports_finished CHECK ((status = 'running') = (finished_at IS NULL)),
    CONSTRAINT tenant_exports_done CHECK ((status = 'done') = (manifest IS NOT NULL))
);
CREATE INDEX tenant_exports_tenant ON tenant_exports (tenant, created_at);

-- A job's archive, the gzip'd tar's bytes in 1 MiB chunks in order.
CREATE TABLE tenant_export_chunks (
    job  uuid  NOT NULL REFERENCES tenant_exports (id) ON DELETE CASCADE,
    seq  int   NOT NULL CHECK (seq >= 0),
    data bytea NOT NULL,
    CONSTRAINT tenant_export_chunks_pkey PRIMARY KEY (job, seq)
);
