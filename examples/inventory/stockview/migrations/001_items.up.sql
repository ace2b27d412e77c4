-- The inventory module's read model: stock per SKU (projection
-- inventory_items). It follows every rule of a tenant table (ARCHITECTURE
-- decision 3, checked by the catalog test): tenant_id NOT NULL with the
-- tenant pattern, RLS enabled and forced, policies on app.tenant_id with
-- USING and WITH CHECK, a key that starts with tenant_id, explicit grants
-- and no TRUNCATE. Times come from the events (a rebuild reproduces rows
-- exactly); counters change in place, so pages keep room for HOT updates.
CREATE TABLE inventory_items (
    tenant_id  text        NOT NULL CHECK (tenant_id ~ '^[a-z0-9-]{1,63}$'),
    sku        text        COLLATE "C" NOT NULL,
    on_hand    bigint      NOT NULL CHECK (on_hand >= 0),
    reserved   bigint      NOT NULL CHECK (reserved >= 0),
    version    bigint      NOT NULL CHECK (version > 0),
    updated_at timestamptz NOT NULL,
    CONSTRAINT inventory_items_reserved_on_hand CHECK (reserved <= on_hand),
    CONSTRAINT inventory_items_pkey PRIMARY KEY (tenant_id, sku)
) WITH (fillfactor = 85);

ALTER TABLE inventory_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE inventory_items FORCE ROW LEVEL SECURITY;
CREATE POLICY inventory_items_app ON inventory_items FOR SELECT TO strata_app
    USING (tenant_id = current_setting('app.tenant_id', true));
CREATE POLICY inventory_items_projector ON inventory_items TO strata_projector
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT ON inventory_items TO strata_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON inventory_items TO strata_projector;
