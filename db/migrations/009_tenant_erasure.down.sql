REVOKE ALL ON "watermill_strata_events" FROM strata_eraser;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT p.polname, c.relname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'strata' AND 'strata_eraser'::regrole = ANY (p.polroles) LOOP
        EXECUTE format('DROP POLICY %I ON strata.%I', r.polname, r.relname);
        EXECUTE format('REVOKE ALL ON strata.%I FROM strata_eraser', r.relname);
    END LOOP;
END $$;
REVOKE USAGE ON SCHEMA strata FROM strata_eraser;
DROP TRIGGER events_refuse_erased ON events;
DROP FUNCTION events_refuse_erased();
DROP TABLE tenant_erasures;
DROP TABLE tenant_directory_members;
