// Package replay is the operator's side of the read models, as a library:
// the status of every projection, rebuilds without downtime (whole, for one
// tenant, or the streams touched since a position; ARCHITECTURE decision
// 6), and the dead-letter store's list, show, retry and discard
// (decision 5). `strata replay` (cmd/strata) and the admin HTTP routes
// (replay/adminapi) both drive a Service; neither does any of the work
// itself.
//
// Everything runs as db.RoleProjector, under each tenant's setting for
// tenant rows; creating, swapping and dropping shadow tables runs on the
// owner connection (Config.Owner), switching to db.RoleOwner for the
// transaction (its login must be a member, as the login that runs `strata
// migrate up` is). A serving process's projector login cannot become the
// owner (ARCHITECTURE decision 11), so DDL never runs on it. Operations that must not
// interleave with a projection's runner take its lease through
// projections.AcquireExclusive: the runner, in whatever process, finishes
// its batch and yields until the operation is done.
//
// It imports projections, the eventstore port, domain, db and pgx;
// never commands, never readmodels.
package replay
