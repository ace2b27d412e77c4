// Package queryapi serves the query HTTP API: orders, the order list,
// customer summaries, daily revenue and the projections' admin status,
// with read-your-writes through X-Consistency-Token. It reuses
// internal/httpapi (authentication, the error shape and table) and reads
// through readmodels; it imports projections for projection names, the
// consistency wait and status, never commands.
package queryapi
