-- The orders module's read models: the tables of its four projections.
--
-- Every tenant table follows the engine's rules (ARCHITECTURE decision 3,
-- checked by the catalog test for every table of the schema with a
-- tenant_id column): tenant_id NOT NULL with the tenant pattern CHECK;
-- ENABLE and FORCE ROW LEVEL SECURITY; policies on
-- current_setting('app.tenant_id', true) (strata_app may SELECT its
-- tenant's rows, strata_projector may do anything to its transaction's
-- tenant's rows, USING and WITH CHECK); every unique key starts with
-- tenant_id; explicit GRANTs, and nobody gets TRUNCATE. Read-model
-- timestamps come from the events, never from now(), so that a rebuild
-- reproduces the rows exactly. Tables updated in place keep 15% of each
-- page free (fillfactor 85) for HOT updates.
--
-- Databases migrated before modules existed got these tables from the
-- engine's 002_read_side; there this migration is recorded as adopted
-- without running (db.Line.Adopts).

-- order_details (projection order_details): one row per order, with its
-- lines in order_detail_lines.
CREATE TABLE order_details (
    tenant_id    text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    order_id     text        COLLATE "C" NOT NULL,
    customer_id  text        NOT NULL,
    status       text        NOT NULL CHECK (status IN ('draft', 'placed', 'paid', 'cancelled')),
    currency     text        NOT NULL,
    total_amount bigint      NOT NULL DEFAULT 0,
    version      bigint      NOT NULL CHECK (version > 0),
    created_at   timestamptz NOT NULL,
    placed_at    timestamptz,
    paid_at      timestamptz,
    cancelled_at timestamptz,
    CONSTRAINT order_details_pkey PRIMARY KEY (tenant_id, order_id)
) WITH (fillfactor = 85);
-- seq is the stream version of the event that put the product on the
-- order: lines are listed by it, as the aggregate keeps them.
CREATE TABLE order_detail_lines (
    tenant_id  text   NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    order_id   text   COLLATE "C" NOT NULL,
    product_id text   COLLATE "C" NOT NULL,
    seq        bigint NOT NULL,
    quantity   bigint NOT NULL CHECK (quantity > 0),
    unit_price bigint NOT NULL,
    currency   text   NOT NULL,
    line_total bigint NOT NULL,
    CONSTRAINT order_detail_lines_pkey PRIMARY KEY (tenant_id, order_id, product_id)
) WITH (fillfactor = 85);

-- order_list (projection order_list): what listing and filtering orders
-- needs. Listed newest first; order_id breaks ties, so the order is total
-- and keyset pagination is stable. The indexes are scanned backwards, and a
-- page after a cursor starts with an index probe on (created_at, order_id).
CREATE TABLE order_list (
    tenant_id    text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    order_id     text        COLLATE "C" NOT NULL,
    customer_id  text        COLLATE "C" NOT NULL,
    status       text        NOT NULL CHECK (status IN ('draft', 'placed', 'paid', 'cancelled')),
    currency     text        NOT NULL,
    total_amount bigint,     -- known once placed
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL, -- time of the last status change
    CONSTRAINT order_list_pkey PRIMARY KEY (tenant_id, order_id)
) WITH (fillfactor = 85);
CREATE INDEX order_list_recent ON order_list (tenant_id, created_at, order_id);
CREATE INDEX order_list_by_status ON order_list (tenant_id, status, created_at, order_id);
CREATE INDEX order_list_by_customer ON order_list (tenant_id, customer_id, created_at, order_id);

-- customer_summary (projection customer_summary): counters per customer,
-- paid totals per customer and currency, and the projection's private
-- order -> customer lookup (order.paid and order.cancelled do not name the
-- customer). A projection reads only its own tables, so that it can be
-- rebuilt alone.
CREATE TABLE customer_summaries (
    tenant_id   text   NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    customer_id text   COLLATE "C" NOT NULL,
    orders      bigint NOT NULL DEFAULT 0,
    open_orders bigint NOT NULL DEFAULT 0,
    CONSTRAINT customer_summaries_pkey PRIMARY KEY (tenant_id, customer_id)
) WITH (fillfactor = 85);
CREATE TABLE customer_paid_totals (
    tenant_id   text   NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    customer_id text   COLLATE "C" NOT NULL,
    currency    text   NOT NULL,
    amount      bigint NOT NULL DEFAULT 0,
    CONSTRAINT customer_paid_totals_pkey PRIMARY KEY (tenant_id, customer_id, currency)
) WITH (fillfactor = 85);
CREATE TABLE customer_orders (
    tenant_id   text NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    order_id    text COLLATE "C" NOT NULL,
    customer_id text COLLATE "C" NOT NULL,
    CONSTRAINT customer_orders_pkey PRIMARY KEY (tenant_id, order_id)
);

-- daily_revenue (projection daily_revenue): paid orders per tenant, UTC
-- day of payment and currency.
CREATE TABLE daily_revenue (
    tenant_id text   NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    day       date   NOT NULL,
    currency  text   NOT NULL,
    amount    bigint NOT NULL DEFAULT 0,
    orders    bigint NOT NULL DEFAULT 0,
    CONSTRAINT daily_revenue_pkey PRIMARY KEY (tenant_id, day, currency)
) WITH (fillfactor = 85);

-- Row-level security for the read models.
ALTER TABLE order_details ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_details FORCE ROW LEVEL SECURITY;
CREATE POLICY order_details_app ON order_details FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY order_details_projector ON order_details TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE order_detail_lines ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_detail_lines FORCE ROW LEVEL SECURITY;
CREATE POLICY order_detail_lines_app ON order_detail_lines FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY order_detail_lines_projector ON order_detail_lines TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE order_list ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_list FORCE ROW LEVEL SECURITY;
CREATE POLICY order_list_app ON order_list FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY order_list_projector ON order_list TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE customer_summaries ENABLE ROW LEVEL SECURITY;
ALTER TABLE customer_summaries FORCE ROW LEVEL SECURITY;
CREATE POLICY customer_summaries_app ON customer_summaries FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY customer_summaries_projector ON customer_summaries TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE customer_paid_totals ENABLE ROW LEVEL SECURITY;
ALTER TABLE customer_paid_totals FORCE ROW LEVEL SECURITY;
CREATE POLICY customer_paid_totals_app ON customer_paid_totals FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY customer_paid_totals_projector ON customer_paid_totals TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

-- The lookup is the projector's working state: the application role has
-- neither a policy nor a grant on it.
ALTER TABLE customer_orders ENABLE ROW LEVEL SECURITY;
ALTER TABLE customer_orders FORCE ROW LEVEL SECURITY;
CREATE POLICY customer_orders_projector ON customer_orders TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

ALTER TABLE daily_revenue ENABLE ROW LEVEL SECURITY;
ALTER TABLE daily_revenue FORCE ROW LEVEL SECURITY;
CREATE POLICY daily_revenue_app ON daily_revenue FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY daily_revenue_projector ON daily_revenue TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));

GRANT SELECT ON order_details, order_detail_lines, order_list, customer_summaries, customer_paid_totals, daily_revenue
    TO strata_app;
GRANT SELECT, INSERT, UPDATE, DELETE
    ON order_details, order_detail_lines, order_list, customer_summaries, customer_paid_totals, customer_orders, daily_revenue
    TO strata_projector;
