// Package failpoint kills the process at named points of the code, so that
// tests can prove what survives a crash at exactly that point (for example
// between a projection's read-model writes and its commit); it can also
// slow a point down (a slow broker) or make it panic for one key (a
// module's handler that panics on one tenant's events). It is inert unless
// the environment variable STRATA_FAILPOINTS names a point; it imports
// only the standard library.
package failpoint
