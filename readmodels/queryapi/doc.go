// Package queryapi is the generic query HTTP plumbing: modules register
// their query routes (Route: the projections behind it, its parameters, a
// Prepare that validates and returns the read), and every route gets strict
// query-string parsing, read-your-writes through X-Consistency-Token and
// the API's error shape. It also serves the projections' admin status. It
// reuses httpapi and reads through readmodels; it imports
// projections for the consistency wait and status, never commands, never a
// module.
package queryapi
