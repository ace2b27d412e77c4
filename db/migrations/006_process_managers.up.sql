-- The process managers' runtime (ARCHITECTURE decision 10;
-- docs/process-managers.md): per instance its state, its outbox of
-- outgoing commands and intents, its durable deadlines and its history.
--
-- A process's checkpoint is its row in projection_checkpoints (under the
-- process's name), so that it has a generation and the dead-letter store
-- of 004 (dead_letters, parked_streams with projection = the process's
-- name) parks its instances like a projection's streams; its lease and
-- pause lock are the projections' too. The runner writes an instance's
-- state, the steps and deadlines it decided, its history and the
-- checkpoint in one transaction.
--
-- Every table is a tenant table and follows the rules of 002_read_side:
-- tenant_id NOT NULL with the pattern CHECK, RLS ENABLE'd and FORCE'd, a
-- SELECT policy for strata_app and a USING + WITH CHECK policy for
-- strata_projector on the transaction's tenant, unique keys starting with
-- tenant_id, explicit grants and no TRUNCATE. The runner learns which
-- tenants to look at from the log (projections.Tenants) and from its own
-- decisions, and reads each tenant under its own setting.
--
-- Timestamps are the runner's clock (RunnerConfig.Now), passed in, so that
-- tests with an injected clock see the times they set.

-- process_instances: one row per instance of a process. state is the JSON
-- of the process's state type (NULL: no decision yet, which happens only
-- when the instance's very first input was parked). inputs counts the
-- inputs decided; last_progress_at is the last decision (what "stuck"
-- measures), updated_at the last change of any kind. parked: a step or a
-- decision failed; every later input waits in dead_letters until an
-- operator retries or discards (ARCHITECTURE decision 10: the instance is
-- parked, not the process). last_event is the last log event the instance
-- decided, whole, for the operator's history.
CREATE TABLE process_instances (
    tenant_id        text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    process          text        NOT NULL CHECK (process ~ '^[a-z][a-z0-9_]{0,62}$'),
    instance         text        NOT NULL CHECK (instance ~ '^[A-Za-z0-9._-]{1,64}$'),
    stream_id        text        NOT NULL CHECK (stream_id <> ''),
    state            jsonb,
    status           text        NOT NULL CHECK (status ~ '^[a-z][a-z_]{0,62}$'),
    done             boolean     NOT NULL DEFAULT false,
    parked           boolean     NOT NULL DEFAULT false,
    inputs           bigint      NOT NULL DEFAULT 0 CHECK (inputs >= 0),
    last_event       jsonb,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    last_progress_at timestamptz NOT NULL,
    CONSTRAINT process_instances_pkey PRIMARY KEY (tenant_id, process, instance)
) WITH (fillfactor = 85);
-- Operators list by status and look for stuck instances; retries find the
-- instances of a parked stream.
CREATE INDEX process_instances_status ON process_instances (tenant_id, process, status, last_progress_at);
CREATE INDEX process_instances_stream ON process_instances (tenant_id, process, stream_id);

-- process_steps: the outbox. One row per step a decision issued, keyed by
-- the step's key within the instance: a step decided again with the same
-- key is not inserted twice (ON CONFLICT DO NOTHING), and its idem_key
-- (process.StepKey) is what the command or the provider receives, so a
-- re-dispatch is applied once.
--   pending:   to be executed at next_attempt_at (attempts so far failed
--              transiently, last_error the latest, clipped);
--   done:      executed; result is what the command or port answered;
--   rejected:  a definite refusal (result holds the reason);
--   parked:    failed past the attempts; its instance is parked;
--   discarded: an operator discarded the parked instance; never executed.
-- last_error is for operators of the deployment; it may hold provider or
-- database text and never reaches a tenant's client.
CREATE TABLE process_steps (
    tenant_id       text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    process         text        NOT NULL CHECK (process ~ '^[a-z][a-z0-9_]{0,62}$'),
    instance        text        NOT NULL,
    step            text        NOT NULL CHECK (length(step) BETWEEN 1 AND 120),
    kind            text        NOT NULL CHECK (kind IN ('command', 'intent')),
    name            text        NOT NULL CHECK (name <> ''),
    payload         jsonb       NOT NULL,
    idem_key        text        NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
    status          text        NOT NULL DEFAULT 'pending'
                                CHECK (status IN ('pending', 'done', 'rejected', 'parked', 'discarded')),
    attempts        int         NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz,
    last_error      text        CHECK (length(last_error) <= 2000),
    result          jsonb,
    created_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    CONSTRAINT process_steps_pkey PRIMARY KEY (tenant_id, process, instance, step),
    CONSTRAINT process_steps_pending CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL))
) WITH (fillfactor = 85);
-- The dispatcher's queue: due pending steps of one tenant and process.
CREATE INDEX process_steps_due ON process_steps (tenant_id, process, next_attempt_at) WHERE status = 'pending';

-- process_deadlines: durable timers, one per (instance, name). Setting a
-- deadline again moves it (and re-arms it); firing marks it fired in the
-- transaction that decides the timeout, so a firing is exactly-once in
-- effect (a crash before that commit fires it again, after it never).
-- A decision that is Done cancels its instance's pending deadlines.
CREATE TABLE process_deadlines (
    tenant_id   text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    process     text        NOT NULL CHECK (process ~ '^[a-z][a-z0-9_]{0,62}$'),
    instance    text        NOT NULL,
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 120),
    due_at      timestamptz NOT NULL,
    status      text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'fired', 'cancelled')),
    set_at      timestamptz NOT NULL,
    fired_at    timestamptz,
    CONSTRAINT process_deadlines_pkey PRIMARY KEY (tenant_id, process, instance, name),
    CONSTRAINT process_deadlines_fired CHECK ((status = 'fired') = (fired_at IS NOT NULL))
) WITH (fillfactor = 85);
CREATE INDEX process_deadlines_due ON process_deadlines (tenant_id, process, due_at) WHERE status = 'pending';

-- process_history: what happened to an instance, in order (id): each input
-- decided (event, outcome, timeout), each input recorded without a
-- decision (ignored: the instance was done; parked: it waits in the
-- dead-letter store), and each operator action (retried, discarded).
-- summary says what the input was (event type, position and ID; step and
-- outcome; deadline name and due time); status_after is the instance's
-- status after it; note is the decision's note or why nothing was decided.
-- History is append-only: no UPDATE or DELETE grant.
CREATE TABLE process_history (
    tenant_id    text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    id           bigint      GENERATED ALWAYS AS IDENTITY,
    process      text        NOT NULL CHECK (process ~ '^[a-z][a-z0-9_]{0,62}$'),
    instance     text        NOT NULL,
    kind         text        NOT NULL
                             CHECK (kind IN ('event', 'outcome', 'timeout', 'ignored', 'parked', 'retried', 'discarded')),
    summary      jsonb       NOT NULL,
    status_after text        NOT NULL,
    note         text        NOT NULL DEFAULT '',
    at           timestamptz NOT NULL,
    CONSTRAINT process_history_pkey PRIMARY KEY (tenant_id, id)
);
CREATE INDEX process_history_instance ON process_history (tenant_id, process, instance, id);

ALTER TABLE process_instances ENABLE ROW LEVEL SECURITY;
ALTER TABLE process_instances FORCE ROW LEVEL SECURITY;
CREATE POLICY process_instances_app ON process_instances FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY process_instances_projector ON process_instances TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE process_steps ENABLE ROW LEVEL SECURITY;
ALTER TABLE process_steps FORCE ROW LEVEL SECURITY;
CREATE POLICY process_steps_app ON process_steps FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY process_steps_projector ON process_steps TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE process_deadlines ENABLE ROW LEVEL SECURITY;
ALTER TABLE process_deadlines FORCE ROW LEVEL SECURITY;
CREATE POLICY process_deadlines_app ON process_deadlines FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY process_deadlines_projector ON process_deadlines TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE process_history ENABLE ROW LEVEL SECURITY;
ALTER TABLE process_history FORCE ROW LEVEL SECURITY;
CREATE POLICY process_history_app ON process_history FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY process_history_projector ON process_history TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

GRANT SELECT ON process_instances, process_steps, process_deadlines, process_history TO strata_app;
GRANT SELECT, INSERT, UPDATE ON process_instances, process_steps, process_deadlines TO strata_projector;
GRANT SELECT, INSERT ON process_history TO strata_projector;
