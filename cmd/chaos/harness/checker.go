package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples"
	"github.com/strata-es/strata/projections"
)

// commandIDSpace is the namespace strata derives command IDs in: a command
// sent with an Idempotency-Key gets the ID uuid.NewSHA1(space,
// tenant+"\x00"+key), stamped as command_id on the metadata of every event
// it appends (commands/handler.go, eventIDSpace). The harness repeats the
// derivation instead of importing it, on purpose: should strata ever derive
// it differently, every event shows up as "from no command of the history"
// and the check fails loudly instead of quietly matching nothing.
var commandIDSpace = uuid.MustParse("6f1c1b3a-5d1e-4f5e-9a0b-2c7d8e9f0a1b")

func commandID(tenant, key string) string {
	return uuid.NewSHA1(commandIDSpace, []byte(tenant+"\x00"+key)).String()
}

// eventID is the ID strata gives the i-th event a command appends
// (commands/handler.go), derived from its command ID so that a retry
// appends the same events; repeated here for the reason commandID is.
func eventID(commandID string, i int) string {
	return uuid.NewSHA1(commandIDSpace, fmt.Appendf(nil, "%s/%d", commandID, i)).String()
}

// eventsPerCommand is how many events one command of the order domain
// appends: every decision returns exactly one.
const eventsPerCommand = 1

// logEvent is one row of the event log, as the checker reads it (as the
// superuser: every tenant).
type logEvent struct {
	Tenant    string
	Stream    string
	Version   int64
	EventID   string
	Type      string
	CommandID string
	Position  event.Position
	// Tags are the event's tags (its metadata's), which the
	// conditional history's final reads match.
	Tags []string
}

func loadEvents(ctx context.Context, url string) ([]logEvent, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT tenant_id, stream_id, version, event_id::text, event_type,
       coalesce(metadata->>'command_id', ''), tx_id::text, position, metadata->'tags'
FROM strata.events ORDER BY tenant_id, stream_id, version`)
	if err != nil {
		return nil, fmt.Errorf("read the event log: %w", err)
	}
	defer rows.Close()
	var out []logEvent
	for rows.Next() {
		var ev logEvent
		var tx string
		var pos int64
		if err := rows.Scan(&ev.Tenant, &ev.Stream, &ev.Version, &ev.EventID, &ev.Type, &ev.CommandID, &tx, &pos, &ev.Tags); err != nil {
			return nil, err
		}
		major, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return nil, err
		}
		ev.Position = event.Position{Major: major, Minor: uint64(pos)}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// historyVerdict is what the history and the event log say together.
type historyVerdict struct {
	Ops, OK, Fail, Unresolved int
	// Indeterminate counts commands that had at least one indeterminate
	// attempt; ResolvedAfterInfo those of them that then resolved.
	Indeterminate, ResolvedAfterInfo int
	// Replayed counts resolved indeterminate commands whose retry was
	// answered from the stored outcome (Idempotent-Replayed): the lost
	// attempt had in fact executed, and the key kept it from running twice.
	Replayed        int
	Attempts        int
	Events, Streams int

	Lost               int // acknowledged, but no event
	Duplicated         int // more events than one execution appends
	WrongVersion       int // acknowledged version is not where its event is
	WrongStream        int // an event of the command sits in another stream or tenant
	RejectedWithEvents int // definitely rejected, yet events exist
	Phantom            int // events of no command of the history
	Gaps               int // streams whose versions are not 1..n
	UnresolvedApplied  int // unresolved commands that did take effect (allowed, at most once)

	Examples []string
}

func (v *historyVerdict) example(format string, args ...any) {
	if len(v.Examples) < 12 {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

// checkHistory matches every command of the history with the events that
// carry its command ID, and checks every stream's versions.
func checkHistory(ops []*Op, events []logEvent) historyVerdict {
	v := historyVerdict{Ops: len(ops), Events: len(events)}
	byCommand := map[string][]logEvent{}
	for _, ev := range events {
		byCommand[ev.CommandID] = append(byCommand[ev.CommandID], ev)
	}
	known := map[string]bool{}
	for _, op := range ops {
		v.Attempts += len(op.Attempts)
		id := commandID(op.Tenant, op.Key)
		known[id] = true
		evs := byCommand[id]
		if op.hadInfo() {
			v.Indeterminate++
			if op.Outcome != Info {
				v.ResolvedAfterInfo++
				if op.Attempts[len(op.Attempts)-1].Replayed {
					v.Replayed++
				}
			}
		}
		for _, ev := range evs {
			if ev.Tenant != op.Tenant || ev.Stream != op.streamID() {
				v.WrongStream++
				v.example("command %s (%s %s/%s) has an event in %s/%s v%d", op.Key, op.Kind, op.Tenant, op.streamID(), ev.Tenant, ev.Stream, ev.Version)
			}
		}
		switch op.Outcome {
		case OK:
			v.OK++
			switch {
			case len(evs) == 0:
				v.Lost++
				v.example("LOST: %s %s of %s/%s acknowledged at version %d (attempts %d), no event has its command id", op.Kind, op.Key, op.Tenant, op.streamID(), op.Version, len(op.Attempts))
			case len(evs) > eventsPerCommand:
				v.Duplicated++
				v.example("DUPLICATED: %s %s of %s/%s: %d events (versions %s)", op.Kind, op.Key, op.Tenant, op.streamID(), len(evs), versions(evs))
			case evs[len(evs)-1].Version != op.Version:
				v.WrongVersion++
				v.example("%s %s of %s/%s acknowledged version %d, its event is at version %d", op.Kind, op.Key, op.Tenant, op.streamID(), op.Version, evs[len(evs)-1].Version)
			}
		case Fail:
			v.Fail++
			if len(evs) > 0 {
				v.RejectedWithEvents++
				v.example("REJECTED BUT APPLIED: %s %s of %s/%s answered %d %s, yet has events (versions %s)", op.Kind, op.Key, op.Tenant, op.streamID(), op.Status, op.Code, versions(evs))
			}
		default:
			v.Unresolved++
			if len(evs) > eventsPerCommand {
				v.Duplicated++
				v.example("DUPLICATED (unresolved): %s %s of %s/%s: %d events", op.Kind, op.Key, op.Tenant, op.streamID(), len(evs))
			} else if len(evs) > 0 {
				v.UnresolvedApplied++
			}
		}
	}
	for id, evs := range byCommand {
		if !known[id] {
			v.Phantom += len(evs)
			v.example("PHANTOM: %d event(s) with command id %q that no command of the history has, e.g. %s/%s v%d", len(evs), id, evs[0].Tenant, evs[0].Stream, evs[0].Version)
		}
	}
	// Versions per stream: 1..n, each once.
	v.Streams, v.Gaps = streamGaps(events, v.example)
	return v
}

// streamGaps counts the streams of events (ordered by tenant, stream and
// version) and those whose versions are not 1..n, each once, reporting
// each gap to example.
func streamGaps(events []logEvent, example func(format string, args ...any)) (streams, gaps int) {
	for i := 0; i < len(events); {
		j := i
		for j < len(events) && events[j].Tenant == events[i].Tenant && events[j].Stream == events[i].Stream {
			j++
		}
		streams++
		for k := i; k < j; k++ {
			if want := int64(k - i + 1); events[k].Version != want {
				gaps++
				example("VERSION GAP: %s/%s has version %d where %d belongs", events[k].Tenant, events[k].Stream, events[k].Version, want)
				break
			}
		}
		i = j
	}
	return streams, gaps
}

func versions(evs []logEvent) string {
	out := ""
	for i, ev := range evs {
		if i > 0 {
			out += ","
		}
		out += strconv.FormatInt(ev.Version, 10)
	}
	return out
}

// addHistoryCriteria records the invariants every load scenario shares.
func addHistoryCriteria(r *Result, v historyVerdict) {
	r.zero("acknowledged commands lost", v.Lost)
	r.zero("commands applied more than once", v.Duplicated)
	r.zero("acknowledged version differs from the log", v.WrongVersion+v.WrongStream)
	r.zero("rejected commands with events", v.RejectedWithEvents)
	r.zero("events of no command (phantoms)", v.Phantom)
	r.zero("streams with version gaps", v.Gaps)
	r.check("indeterminate commands resolved by retry", "100%",
		fmt.Sprintf("%d/%d", v.ResolvedAfterInfo, v.Indeterminate), v.ResolvedAfterInfo == v.Indeterminate)
	r.note("history: %d commands (%d ok, %d rejected, %d unresolved; %d attempts), %d events in %d streams",
		v.Ops, v.OK, v.Fail, v.Unresolved, v.Attempts, v.Events, v.Streams)
	r.note("%d commands had an indeterminate attempt (timeout, dropped connection, 5xx) and were retried with their idempotency key; %d of the retries were answered from the stored outcome (the lost attempt had executed)", v.Indeterminate, v.Replayed)
	for _, ex := range v.Examples {
		r.note("%s", ex)
	}
}

// checkIdempotencyRecords compares every acknowledged command with the
// outcome strata stored under its key: the same version, a 2xx status.
func checkIdempotencyRecords(ctx context.Context, url string, ops []*Op) (mismatches int, examples []string, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT tenant_id, key, response FROM strata.idempotency_keys`)
	if err != nil {
		return 0, nil, err
	}
	stored := map[string][]byte{}
	for rows.Next() {
		var tenant, key string
		var resp []byte
		if err := rows.Scan(&tenant, &key, &resp); err != nil {
			rows.Close()
			return 0, nil, err
		}
		stored[tenant+"\x00"+key] = resp
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	for _, op := range ops {
		if op.Outcome != OK {
			continue
		}
		raw, ok := stored[op.Tenant+"\x00"+op.Key]
		var rec struct {
			Status int `json:"status"`
			Body   struct {
				Version int64 `json:"version"`
			} `json:"body"`
		}
		if ok {
			ok = json.Unmarshal(raw, &rec) == nil && rec.Status/100 == 2 && rec.Body.Version == op.Version
		}
		if !ok {
			mismatches++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("%s %s of %s/%s acknowledged version %d; stored outcome %q", op.Kind, op.Key, op.Tenant, op.streamID(), op.Version, oneLine(string(raw), 120)))
			}
		}
	}
	return mismatches, examples, nil
}

// logHead returns the newest event of the log, ignoring the visibility
// horizon: with the load stopped, every append has ended, and this is the
// position every projection must reach.
func logHead(ctx context.Context, conn *pgx.Conn) (event.Position, error) {
	var tx string
	var pos int64
	// The output column must not be called tx_id: ORDER BY would then sort
	// its text, "986" after "2409".
	err := conn.QueryRow(ctx, `SELECT e.tx_id::text AS tx_text, e.position FROM strata.events e
ORDER BY e.tx_id DESC, e.position DESC LIMIT 1`).Scan(&tx, &pos)
	if err == pgx.ErrNoRows {
		return event.Position{}, nil
	}
	if err != nil {
		return event.Position{}, err
	}
	major, err := strconv.ParseUint(tx, 10, 64)
	if err != nil {
		return event.Position{}, err
	}
	return event.Position{Major: major, Minor: uint64(pos)}, nil
}

// logHeadAt is logHead on a connection of its own to url.
func logHeadAt(ctx context.Context, url string) (event.Position, error) {
	conn, err := connectAdmin(ctx, url)
	if err != nil {
		return event.Position{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return logHead(ctx, conn)
}

// readCheckpoints returns every projection's checkpoint.
func readCheckpoints(ctx context.Context, conn *pgx.Conn) (map[string]projections.Checkpoint, error) {
	conn.Exec(ctx, "SET search_path = strata") //nolint:errcheck // the query below fails instead
	return projections.ReadCheckpoints(ctx, conn, projections.Names(examples.All().Projections())...)
}

// waitAtHead waits until every projection's checkpoint has reached target
// and returns when that happened; ok is false when limit passed first.
func waitAtHead(ctx context.Context, url string, target event.Position, limit time.Duration) (at time.Time, ok bool, behind string, err error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return time.Time{}, false, "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	deadline := time.Now().Add(limit)
	conn.Exec(ctx, "SET search_path = strata") //nolint:errcheck // the query below fails instead
	for {
		// Every row: a partitioned projection's partitions too.
		cps, err := projections.ReadCheckpoints(ctx, conn)
		if err != nil {
			return time.Time{}, false, "", err
		}
		behind = ""
		names := projections.Names(examples.All().Projections())
		sort.Strings(names)
		// A partitioned projection is at the head once every partition is.
		for _, name := range projections.LiveKeys(cps, names) {
			if cp := cps[name]; cp.Position.Less(target) {
				behind += fmt.Sprintf("%s at %s (status %s %s); ", name, cp.Position, cp.Status, oneLine(cp.LastError, 100))
			}
		}
		if behind == "" {
			return time.Now(), true, "", nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, false, behind + "head " + target.String(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false, behind, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
