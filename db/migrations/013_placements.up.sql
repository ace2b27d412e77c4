-- Placements (ARCHITECTURE decision 14, docs/scaling.md "Placements"): a
-- placement is a PostgreSQL database with strata's schema and its own
-- global log, runners, checkpoints, dead letters and process managers.
-- This database is always the placement 'pool' (url ''); the others are
-- added by `strata placements add`, which migrates them first. The
-- directory maps every tenant to one (tenants.placement, now a reference).
--
--   url:    the owner's URL of the placement's database (a login that may
--           become strata_owner there); the serving processes derive their
--           serving logins from it as they do from DATABASE_URL. It may
--           carry a password, so only the owner reads this table: serving
--           processes read it on their owner connection.
--   status: active (tenants may be placed there), or retired (no tenant
--           left, none may be placed).
--   epoch:  taken anew whenever the placement's database is replaced (a
--           restore): consistency tokens carry it.
CREATE TABLE placements (
    name       text        PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    url        text        NOT NULL,
    status     text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'retired')),
    epoch      bigint      NOT NULL DEFAULT 1 CHECK (epoch > 0),
    note       text        NOT NULL DEFAULT '' CHECK (length(note) <= 500),
    added_at   timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((name = 'pool') = (url = ''))
);
INSERT INTO placements (name, url, note) VALUES ('pool', '', 'this database: the shared placement');

ALTER TABLE tenants ADD CONSTRAINT tenants_placement_fk FOREIGN KEY (placement) REFERENCES placements (name);

-- The serving processes route a tenant's requests by its placement.
GRANT SELECT (placement) ON tenants TO strata_app;
