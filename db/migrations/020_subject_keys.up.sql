-- Personal data per data subject (ARCHITECTURE decision 16; issue 30;
-- docs/personal-data.md). A module declares the personal fields of its
-- events; they reach the log sealed with a data key of their subject.
--
-- key_encryption_keys: the key-encryption keys held in the database (the
-- default; a deployment may keep its KEK in a file instead,
-- STRATA_KEK_FILE). One is current: it wraps new data keys; the others
-- unwrap what they wrapped until `strata keys rotate` re-wraps it and
-- deletes them. Global:
-- no tenant's data. The serving roles read them and create the first.
CREATE TABLE key_encryption_keys (
    id         text        PRIMARY KEY CHECK (id ~ '^db-[0-9a-f]{16}$'),
    key        bytea       NOT NULL CHECK (length(key) = 32),
    current    boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- When it stopped being the current one: a rotation deletes it only
    -- once it wraps no key and every process has read the new current one
    -- (they read it again every minute).
    retired_at timestamptz,
    CHECK (current = (retired_at IS NULL))
);
CREATE UNIQUE INDEX key_encryption_keys_one_current ON key_encryption_keys (current) WHERE current;
GRANT SELECT, INSERT ON key_encryption_keys TO strata_app, strata_projector;

-- subject_keys: one data key per tenant and data subject, wrapped by the
-- KEK kek_id. The subject is named by a hash of the tenant and its ID
-- (personal.SubjectHash), never by the ID. Destroying a row shreds every
-- field its key sealed, wherever the event went. A tenant table under the
-- rules of 002_read_side: the serving roles read and create keys under the
-- transaction's tenant; only the eraser deletes one, and re-wraps them in
-- a rotation (its policy and its SELECT, DELETE are db.EnsureEraserGrants').
CREATE TABLE subject_keys (
    tenant_id    text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    key_id       text        NOT NULL CHECK (key_id ~ '^[0-9a-f]{32}$'),
    subject_hash text        NOT NULL CHECK (subject_hash ~ '^[0-9a-f]{64}$'),
    kek_id       text        NOT NULL CHECK (length(kek_id) BETWEEN 1 AND 100),
    wrapped      bytea       NOT NULL CHECK (length(wrapped) BETWEEN 1 AND 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT subject_keys_pkey PRIMARY KEY (tenant_id, key_id),
    CONSTRAINT subject_keys_subject UNIQUE (tenant_id, subject_hash)
);
ALTER TABLE subject_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE subject_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY subject_keys_app ON subject_keys FOR ALL TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY subject_keys_projector ON subject_keys FOR ALL TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT ON subject_keys TO strata_app, strata_projector;
GRANT UPDATE (kek_id, wrapped) ON subject_keys TO strata_eraser;
