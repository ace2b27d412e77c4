-- Sums across orders are exact (issue 13, item 4). The domain bounds one
-- order: its line totals and its total fit an int64, so the per-order
-- columns (order_details, order_detail_lines, order_list) stay bigint. A
-- sum over orders has no such bound: two paid orders of
-- 9223372036854775807 already pass it, and the bigint columns below made
-- the second payment fail with "bigint out of range" (a dead letter for a
-- valid command) while the set-based path wrapped around. They become
-- numeric, which adds integers exactly at any size; the projections only
-- ever add whole minor units to them, so the values stay integers.
ALTER TABLE customer_paid_totals ALTER COLUMN amount TYPE numeric;
ALTER TABLE daily_revenue ALTER COLUMN amount TYPE numeric;

-- A rebuild interrupted before this migration keeps its shadow copies
-- (<table>__rebuild..., replay/shadow.go) with the old column type; a
-- resumed full rebuild would swap a bigint table back in. They change
-- with their live tables. (A tenant rebuild's shadow is only copied from,
-- but it must hold the same sums, so it changes too.)
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
        EXECUTE format('ALTER TABLE %I ALTER COLUMN amount TYPE numeric', t);
    END LOOP;
END
$$;
