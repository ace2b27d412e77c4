DROP TABLE tenant_export_chunks;
DROP TABLE tenant_exports;
