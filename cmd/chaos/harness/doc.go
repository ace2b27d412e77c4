// Package harness is strata's fault harness (issue 8, notes/reliability.md §5).
//
// It starts a private PostgreSQL (pgembed, durable settings), runs the real
// strata binary (`strata migrate up`, `strata serve`) as child processes
// under a small supervisor that restarts them when they exit, drives bounded
// load from several clients over loopback while injecting faults (SIGKILL of
// the serving processes, an immediate PostgreSQL shutdown, a long writing
// transaction in another database), records a Jepsen-style history of every
// command (ok, fail or info, with every attempt) and checks it afterwards
// against the event store and the read models: nothing acknowledged is lost
// or duplicated, nothing rejected left events, every stream's versions are
// contiguous, every projection reaches the head of the log and every read
// model equals a fresh rebuild from the events. Two further scenarios try to
// read another tenant's data through the HTTP APIs (R11) and as the
// application's database role, also by trying to leave the role from the
// serving logins' sessions (R12). The soak (R18) runs the load for a long
// time at 30 % of a measured maximum with those faults in turn, samples
// each process's RSS and goroutines, the projections' lag and the dead
// letters, and plots them.
//
// Each scenario prints its pass criteria in a result table; docs/chaos.md
// describes them. The program is cmd/chaos (`make chaos`); a short
// deterministic subset runs in this package's tests.
//
// It drives strata only from the outside (the binary, HTTP, SQL) and imports
// strata's packages for plumbing (pgembed, db, auth) and for building the
// reference read models (projections, eventstore/postgres); it derives
// command IDs itself rather than importing commands (see commandID).
package harness
