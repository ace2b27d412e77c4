-- The retention job runs per placement (docs/tenants.md, "Retention"): the
-- job of a placement reads the directory in the control plane for the
-- tenants placed there, as the projector role.
GRANT SELECT (placement) ON tenants TO strata_projector;
