// Package esdb is the EventStoreDB/KurrentDB adapter of the event store port
// (ARCHITECTURE decision 7), on EventStore-Client-Go v4. It imports the
// port, domain/event and the client; of KurrentDB-Client-Go only its
// generated v2 protocol packages (streams, streams/errors, errors), never
// its client, whose v1 protobuf registrations collide with this client's
// and panic at init.
//
// # Streams, metadata, positions
//
// A strata stream s of tenant t is the ESDB stream "<namespace>-<t>.<s>"
// (namespace "strata" by default): the tenant is in the name, so another
// tenant's read cannot reach it, and in every event's JSON metadata
// {"tenant", "schema_version", event.Metadata fields, "$correlationId",
// "$causationId"}, which the reader checks against the name. Event IDs are
// the caller's (stable across retries), content type JSON. Version n is
// revision n-1; expected versions map to Any, NoStream (also exact 0),
// StreamExists and Revision(n-1). A global position is (commit, prepare).
//
// # Global log
//
// ReadAll drains catch-up subscriptions to $all filtered server-side on the
// namespace prefix (see log.go); a dropped subscription resubscribes from
// the last position it received. LatestCheckpoint exposes the server's
// filtered-scan checkpoints so a runner may store them. Head and Lag (the
// projections monitor's LogStats) read $all backwards. Reading $all needs
// the $ops or $admins group. Servers: KurrentDB, or EventStoreDB 23.10 and
// later (22.6 and later with slower empty reads; see docs/eventstoredb.md).
//
// # Idempotency
//
// The server deduplicates event IDs only in part: with an exact expected
// revision it recognises a retry whose events sit right after that revision
// (durably, from its index); with Any or StreamExists it consults an
// in-memory cache that a restart empties. So the command idempotency record
// stays in PostgreSQL (decision 4, WithIdempotencyStore), written after the
// append: lookup, append, save, under a per-key lock in this process. That
// leaves two gaps, which the command handler closes together with this
// store:
//
//   - Crash window. If the process dies (or PostgreSQL fails) after the
//     append and before the save, the events exist and the key does not. A
//     retry finds no record, reloads the stream (now holding the command's
//     events) and would decide again. Its event IDs are the same
//     (deterministic from the key), but its expected version is the new
//     head, where the server accepts them again. The store refuses such an
//     append (see Duplicate events) with ErrVersionConflict, so nothing is
//     stored twice; but only the handler can answer correctly: when the
//     loaded stream already holds events with this command's CommandID, the
//     command has happened, and the handler records and returns that
//     outcome instead of deciding again (commands.Handler does this).
//     Without that check the client would see a version conflict, or, if
//     the new decision is a rejection, a rejection recorded for a command
//     that succeeded.
//   - Concurrent duplicates in different processes both miss the lookup.
//     They load the same version and decide the same events with the same
//     IDs; the first append writes them, the second is deduplicated by the
//     server's exact-revision check (or conflicts, and its retry finds the
//     key or the command's events). Both save; the loser gets
//     ErrIdempotencyKeyExists and replays the winner's response, which
//     describes the same events.
//
// A save that fails after a successful append is logged, and the append is
// reported as the success it is.
//
// # Duplicate events
//
// Before appending to a stream that may have events, the store reads its
// last events before the expected position (WithDuplicateWindow, default
// 32) and refuses the append with ErrVersionConflict if one of them has one
// of the new event IDs, as the PostgreSQL store's unique index does. That
// costs one read per append; events further back than the window are not
// checked (the handler's CommandID check has no window).
//
// # Multi-stream appends, tags and conditions
//
// The store is an eventstore.MultiAppender and an eventstore.TagReader on
// KurrentDB 25.1 and later, through the v2 protocol's AppendRecords
// (records.go), which writes records to several streams in one transaction
// after checking the state of any streams, written or not. The v4 client
// has no such call, so the store dials its own gRPC connection from the
// same connection string (records_conn.go: TLS and credentials as the
// client uses them; the first host or seed, redirected once to the leader
// a follower names). Older servers answer ErrUnsupported.
//
//   - AppendMulti: each stream's expectation is a check of that stream; a
//     failed one is ErrVersionConflict naming the stream. Idempotency as
//     for one stream (looked up before, saved after).
//   - Tags: every tagged append writes, in the same transaction, one
//     marker per (event, tag) to the stream "<namespace>.tag.<tenant>.<hash
//     of the tag>" and one record to the tenant's tag log
//     "<namespace>.tags.<tenant>"; neither matches the log filter
//     (<namespace>-), so the global log never shows them. An append
//     without tags and condition keeps the v1 path and costs nothing more.
//   - ReadTagged reads the tag log's tail (its position is the read's),
//     then each tag's stream, then the events the matching markers name
//     (one read each).
//   - A condition costs one read per tag of its query before the append
//     (a matching marker after its position fails it at once), and pins
//     those tag streams in the append's checks, so a tagged append
//     committed in between fails it (ErrConditionFailed); one of another
//     type on the same tag may fail it too (the caller reads again).
//   - A tagged part expecting Any or StreamExists is pinned at the
//     revision read just before (its markers name its events' versions),
//     and retried if that moved.
//
// tags.go explains why the positions are exact.
//
// # Connection
//
// The client connects lazily and does not retry operations; the store
// translates its failures into eventstore.ErrUnavailable and re-creates a
// client whose connection state machine gave up (conn.go). Errors never
// carry the connection string or its credentials.
package esdb
