-- Tenant moves between placements (docs/scaling.md, "Moving a tenant").
--
-- tenant_write_freezes, in every database: a tenant whose row is here may
-- not append events or record idempotency outcomes in this database. A
-- move writes it on the source for the final catch-up (the per-tenant
-- write freeze: the tenant's commands answer 503 with Retry-After, no
-- other tenant notices) and leaves it there once the directory has
-- switched, so a process that still routes the tenant here cannot write
-- behind the move's back. Checked once per statement, as the erasure's
-- refusal is; the move waits for the writers that were in progress when
-- it committed (pg_locks), every later one sees it. Only the owner writes.
CREATE TABLE tenant_write_freezes (
    tenant    text        PRIMARY KEY CHECK (tenant ~ '^[a-z0-9-]{1,63}$'),
    reason    text        NOT NULL CHECK (length(reason) <= 200),
    frozen_at timestamptz NOT NULL DEFAULT now()
);
GRANT SELECT ON tenant_write_freezes TO strata_app, strata_projector;

CREATE FUNCTION refuse_frozen_writes() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    SELECT n.tenant_id INTO t FROM new_rows n JOIN strata.tenant_write_freezes f ON f.tenant = n.tenant_id LIMIT 1;
    IF t IS NOT NULL THEN
        RAISE EXCEPTION 'tenant % is moving to another placement: its writes are frozen for a moment', t USING ERRCODE = 'SF001';
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER events_refuse_frozen AFTER INSERT ON events REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_frozen_writes();
CREATE TRIGGER idempotency_keys_refuse_frozen AFTER INSERT ON idempotency_keys REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_frozen_writes();

-- tenant_moves, in the control-plane database: one row per move, its
-- phase and progress, resumable from any phase after a crash:
--   copying:     the tenant's events and idempotency records are copied to
--                the target in log order while it keeps writing;
--   frozen:      the source refuses its writes; the last ones are copied,
--                the target's read models caught up and compared;
--   switched:    the directory names the target and every serving process
--                acknowledged it; the source's rows are kept: `move --back`
--                returns to it with nothing lost (the last safe rollback
--                point);
--   finished:    `move --finish` purged the source's rows (receipt);
--   rolled_back: `move --back` switched back before finishing.
CREATE TABLE tenant_moves (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant        text        NOT NULL REFERENCES tenants (id) CHECK (tenant ~ '^[a-z0-9-]{1,63}$'),
    source        text        NOT NULL REFERENCES placements (name),
    target        text        NOT NULL REFERENCES placements (name),
    phase         text        NOT NULL DEFAULT 'copying' CHECK (phase IN ('copying', 'frozen', 'switched', 'finished', 'rolled_back')),
    copied_events bigint      NOT NULL DEFAULT 0,
    copied_keys   bigint      NOT NULL DEFAULT 0,
    remaining     bigint      NOT NULL DEFAULT 0,
    frozen_at     timestamptz,
    freeze_ms     double precision,
    verified      jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(verified) = 'object'),
    receipt       jsonb,
    last_error    text,
    requested_by  text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    CHECK (source <> target)
);
-- One unfinished move per tenant.
CREATE UNIQUE INDEX tenant_moves_open ON tenant_moves (tenant) WHERE phase IN ('copying', 'frozen', 'switched');

-- log_watermark, in every database: the end of the log as it was before
-- a tenant's events were deleted from it (a move's purge, an erasure).
-- Deleting the newest events would carry the newest committed position
-- back below the runners' checkpoints, which then look ahead of the log
-- (migration 012) on their next start; the end of the log is the greater
-- of the newest committed event and this mark. A restore from a backup
-- restores the mark with the events, so a real restore is still found.
CREATE TABLE log_watermark (
    id        boolean       PRIMARY KEY DEFAULT true CHECK (id),
    pos_major numeric(20,0) NOT NULL,
    pos_minor bigint        NOT NULL,
    set_at    timestamptz   NOT NULL DEFAULT now()
);
GRANT SELECT ON log_watermark TO strata_app, strata_projector;
-- The purge raises it as strata_eraser, before deleting, from the rows it
-- is about to delete (the only ones it sees).
GRANT SELECT, INSERT, UPDATE ON log_watermark TO strata_eraser;
