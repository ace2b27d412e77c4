DROP TABLE tenant_archives;
CREATE OR REPLACE FUNCTION events_refuse_erased() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    SELECT n.tenant_id INTO t FROM new_events n JOIN strata.tenants d ON d.id = n.tenant_id
    WHERE d.status IN ('erasing', 'erased') LIMIT 1;
    IF t IS NOT NULL THEN
        RAISE EXCEPTION 'tenant % is being erased: the log refuses its events', t USING ERRCODE = 'P0001', HINT = 'tenant_erasing';
    END IF;
    RETURN NULL;
END $$;
ALTER TABLE tenants DROP CONSTRAINT tenants_status_check;
ALTER TABLE tenants ADD CONSTRAINT tenants_status_check
    CHECK (status IN ('provisioning', 'active', 'suspended', 'erasing', 'erased'));
