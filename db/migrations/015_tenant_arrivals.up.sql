-- Tenants arriving in this database by a move (docs/scaling.md, "Moving a
-- tenant"): the copies of their events are history the source's process
-- managers have already decided, not new input. A move writes the row on
-- the target before it copies the first event (through unset: every event
-- of the tenant here is a copy) and sets through, in its freeze, to the
-- tenant's last copied event, after it copied the process managers' state;
-- the process runners pass over the tenant's events up to through, so a
-- step or an intent is never issued a second time by the target. The
-- source side needs no row: its tenant_write_freezes row stays after the
-- switch, and the process runners leave a frozen tenant's outbox and
-- deadlines alone. Only the owner writes.
CREATE TABLE tenant_arrivals (
    tenant       text        PRIMARY KEY CHECK (tenant ~ '^[a-z0-9-]{1,63}$'),
    source       text        NOT NULL CHECK (source <> ''),
    through_tx   xid8,
    through_pos  bigint,
    arrived_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenant_arrivals_through CHECK ((through_tx IS NULL) = (through_pos IS NULL))
);
GRANT SELECT ON tenant_arrivals TO strata_app, strata_projector;
