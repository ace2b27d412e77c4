DROP TABLE engine_settings;
DROP TABLE tenant_audit;
DROP TABLE tenants;
DROP FUNCTION tenants_notify();
DROP FUNCTION tenants_touch();
DROP SEQUENCE tenants_version;
