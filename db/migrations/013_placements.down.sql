REVOKE SELECT (placement) ON tenants FROM strata_app;
ALTER TABLE tenants DROP CONSTRAINT tenants_placement_fk;
DROP TABLE placements;
