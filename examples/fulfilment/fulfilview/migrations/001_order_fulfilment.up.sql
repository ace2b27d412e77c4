-- The fulfilment module's read model: one row per order (projection
-- order_fulfilment), derived from the order events and the inventory
-- events reserving under the order's ID. It follows every rule of a tenant
-- table (ARCHITECTURE decision 3, checked by the catalog test): tenant_id
-- NOT NULL with the tenant pattern, RLS enabled and forced, policies on
-- app.tenant_id with USING and WITH CHECK, a key that starts with
-- tenant_id, explicit grants and no TRUNCATE. Times and positions come
-- from the events, so a rebuild reproduces the rows.
CREATE TABLE order_fulfilment (
    tenant_id         text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    order_id          text        COLLATE "C" NOT NULL,
    stage             text        NOT NULL,
    order_status      text        NOT NULL,
    currency          text        NOT NULL,
    lines             jsonb       NOT NULL CHECK (jsonb_typeof(lines) = 'object'), -- product_id -> quantity
    reserved          integer     NOT NULL CHECK (reserved >= 0),
    released          integer     NOT NULL CHECK (released >= 0),
    committed         integer     NOT NULL CHECK (committed >= 0),
    total_amount      bigint,
    payment_reference text,
    cancel_reason     text,
    version           bigint      NOT NULL CHECK (version > 0), -- the order stream's
    updated_at        timestamptz NOT NULL,
    last_position     bigint      NOT NULL, -- the log row of the last event applied
    CONSTRAINT order_fulfilment_pkey PRIMARY KEY (tenant_id, order_id)
) WITH (fillfactor = 85);

ALTER TABLE order_fulfilment ENABLE ROW LEVEL SECURITY;
ALTER TABLE order_fulfilment FORCE ROW LEVEL SECURITY;
CREATE POLICY order_fulfilment_app ON order_fulfilment FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY order_fulfilment_projector ON order_fulfilment TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT ON order_fulfilment TO strata_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON order_fulfilment TO strata_projector;
