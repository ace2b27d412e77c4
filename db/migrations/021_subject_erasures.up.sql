-- The erasures of data subjects (issue 30; docs/personal-data.md, "Forget
-- a subject"): one row per request, its steps as they are done (a rerun
-- resumes after the last), the destroyed key's ID (random: it names no
-- one), what each store was found to hold and how it was dealt with, and
-- the receipt. The subject is named by its hash (personal.SubjectHash), as
-- in subject_keys. A tenant table: the tenant's admins read their
-- erasures; only the eraser writes them, in the transaction of each step.
CREATE TABLE subject_erasures (
    tenant_id    text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    erasure_id   uuid        NOT NULL,
    subject_hash text        NOT NULL CHECK (subject_hash ~ '^[0-9a-f]{64}$'),
    key_id       text        NOT NULL DEFAULT '' CHECK (key_id ~ '^([0-9a-f]{32})?$'),
    reason       text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    requested_by text        NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 200),
    steps        jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(steps) = 'object'),
    stores       jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(stores) = 'object'),
    receipt      jsonb,
    started_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    CONSTRAINT subject_erasures_pkey PRIMARY KEY (tenant_id, erasure_id)
);
-- One unfinished erasure per subject: a second request resumes it.
CREATE UNIQUE INDEX subject_erasures_open ON subject_erasures (tenant_id, subject_hash) WHERE finished_at IS NULL;
ALTER TABLE subject_erasures ENABLE ROW LEVEL SECURITY;
ALTER TABLE subject_erasures FORCE ROW LEVEL SECURITY;
CREATE POLICY subject_erasures_app ON subject_erasures FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY subject_erasures_projector ON subject_erasures FOR ALL TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT ON subject_erasures TO strata_app, strata_projector;
-- The eraser's policy and its SELECT, DELETE are db.EnsureEraserGrants';
-- it also records the erasure.
GRANT INSERT, UPDATE ON subject_erasures TO strata_eraser;
