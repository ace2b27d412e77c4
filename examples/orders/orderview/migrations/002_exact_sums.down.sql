-- Back to bigint. A sum beyond int64 cannot be stored there: the cast
-- fails ("bigint out of range") and nothing is changed, rather than
-- truncating a tenant's revenue. Rebuild the projections (or delete the
-- rows) first if that happens.
ALTER TABLE customer_paid_totals ALTER COLUMN amount TYPE bigint;
ALTER TABLE daily_revenue ALTER COLUMN amount TYPE bigint;

DO $$
DECLARE
    t text;
BEGIN
    FOR t IN
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind = 'r'
          AND (c.relname LIKE 'customer\_paid\_totals\_\_%' OR c.relname LIKE 'daily\_revenue\_\_%')
          AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'amount' AND NOT a.attisdropped)
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN amount TYPE bigint', t);
    END LOOP;
END
$$;
