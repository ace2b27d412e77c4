REVOKE SELECT (placement) ON tenants FROM strata_projector;
