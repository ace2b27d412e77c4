package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/internal/canary"
)

// hsCount runs a count query on the admin connection.
func hsCount(ctx context.Context, conn *pgx.Conn, q string, args ...any) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, q, args...).Scan(&n)
	return n, err
}

// hsCheckpoint is one row of projection_checkpoints: a projection's, a
// process manager's or the relay's.
type hsCheckpoint struct {
	name, major, minor, status, lastError string
}

func (c hsCheckpoint) atHead(head event.Position) bool {
	major, err1 := strconv.ParseUint(c.major, 10, 64)
	minor, err2 := strconv.ParseUint(c.minor, 10, 64)
	return err1 == nil && err2 == nil && !(event.Position{Major: major, Minor: minor}).Less(head)
}

// hsCheckpoints reads every checkpoint and the log's head.
func hsCheckpoints(ctx context.Context, conn *pgx.Conn) ([]hsCheckpoint, event.Position, error) {
	head, err := logHead(ctx, conn)
	if err != nil {
		return nil, head, err
	}
	rows, err := conn.Query(ctx, `SELECT projection, pos_major::text, pos_minor::text, status, coalesce(last_error, '')
FROM strata.projection_checkpoints ORDER BY projection`)
	if err != nil {
		return nil, head, err
	}
	cps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hsCheckpoint, error) {
		var c hsCheckpoint
		return c, r.Scan(&c.name, &c.major, &c.minor, &c.status, &c.lastError)
	})
	return cps, head, err
}

// hsWaitConsumers waits until every checkpoint (projections, process
// managers, the relay) has passed the log's last event.
func hsWaitConsumers(ctx context.Context, conn *pgx.Conn, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		cps, head, err := hsCheckpoints(ctx, conn)
		if err != nil {
			return err
		}
		var behind []string
		for _, c := range cps {
			if !c.atHead(head) {
				behind = append(behind, fmt.Sprintf("%s at %s/%s (%s %s)", c.name, c.major, c.minor, c.status, oneLine(c.lastError, 80)))
			}
		}
		if len(behind) == 0 && len(cps) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not at the head %s within %s: %s", head, within, strings.Join(behind, "; "))
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// hsWaitSourceSettled waits until every order of the source tenant has a
// process instance at rest: completed, cancelled, or awaiting a payment
// that will not come.
func hsWaitSourceSettled(ctx context.Context, conn *pgx.Conn, orders int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n, err := hsCount(ctx, conn, `SELECT count(*) FROM strata.process_instances WHERE tenant_id = $1
AND status IN ('completed', 'cancelled', 'awaiting_payment')
AND NOT EXISTS (SELECT 1 FROM strata.process_steps s WHERE s.tenant_id = $1 AND s.status = 'pending')`, hsSource)
		if err != nil {
			return err
		}
		if n == int64(orders) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d process instances at rest after %s", hsSource, n, orders, within)
		}
		sleepCtx(ctx, 100*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// hsInsertRaw writes events into tenant's log as the superuser, the way
// history written by an older version (or restored from a backup) is
// there without having passed today's command handlers, then wakes the
// consumers.
func hsInsertRaw(ctx context.Context, url, tenant string, evs []hsPoisonEvent) error {
	conn, err := connectAdmin(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ev := range evs {
		if _, err := conn.Exec(ctx, `INSERT INTO strata.events (tenant_id, stream_id, version, event_id, event_type, schema_version, data, metadata)
VALUES ($1, $2, $3, $4::uuid, $5, 1, $6::jsonb, '{}'::jsonb)`, tenant, ev.stream, ev.version, ev.id, ev.typ, ev.data); err != nil {
			return fmt.Errorf("insert %s %s v%d: %w", ev.kind, ev.stream, ev.version, err)
		}
	}
	_, err = conn.Exec(ctx, `SELECT pg_notify('strata_events', '')`)
	return err
}

// hsScanTables looks for marker in every column of every table of every
// schema of the database but the system's (canary.Scan per schema).
func hsScanTables(ctx context.Context, conn *pgx.Conn, marker string) ([]canary.Find, error) {
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace
WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname NOT LIKE 'pg_toast%' AND nspname NOT LIKE 'pg_temp%' ORDER BY nspname`)
	if err != nil {
		return nil, err
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []canary.Find
	for _, s := range schemas {
		finds, err := canary.Scan(ctx, conn, s, marker)
		if err != nil {
			return nil, err
		}
		for _, f := range finds {
			f.Table = s + "." + f.Table
			out = append(out, f)
		}
	}
	return out, nil
}

func hsFindsStrings(fs []canary.Find) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

func hsFindsString(fs []canary.Find, max int) string {
	s := hsFindsStrings(fs)
	if len(s) > max {
		s = append(s[:max], fmt.Sprintf("and %d more", len(s)-max))
	}
	return strings.Join(s, "; ")
}

// hsBrokerCount is what a scan of the broker found of one tenant.
type hsBrokerCount struct {
	tenant int // messages of the tenant (its subject or its tenant header)
	marker int // messages holding the marker anywhere (subject, headers, payload)
}

func hsBrokerFindings(msgs []brokerMessage, topic, tenant, marker string) hsBrokerCount {
	var c hsBrokerCount
	m := []byte(marker)
	for _, msg := range msgs {
		if strings.HasPrefix(msg.Subject, topic+"."+tenant+".") || slices.Contains(msg.Header["tenant"], tenant) {
			c.tenant++
		}
		found := bytes.Contains(msg.Data, m) || strings.Contains(msg.Subject, marker)
		for k, vs := range msg.Header {
			for _, v := range vs {
				found = found || strings.Contains(k, marker) || strings.Contains(v, marker)
			}
		}
		if found {
			c.marker++
		}
	}
	return c
}

// hsLetter is the part of `strata replay dlq list --json` HOSTILE reads.
type hsLetter struct {
	ID         int64  `json:"id"`
	Projection string `json:"projection"`
	Tenant     string `json:"tenant"`
	Stream     string `json:"stream"`
	Version    int64  `json:"version"`
	EventID    string `json:"event_id"`
	Error      string `json:"error"`
	Status     string `json:"status"`
}

// hsDeadLetters lists every parked letter with the CLI, as an operator
// would: projections', process managers' and the relay's.
func (e *env) hsDeadLetters(ctx context.Context, cliEnv []string) ([]hsLetter, error) {
	code, out, errOut := e.strataCLI(ctx, cliEnv, "replay", "dlq", "list", "--json", "--limit", "10000")
	if code != 0 {
		return nil, fmt.Errorf("dlq list: exit %d: %s", code, oneLine(errOut, 300))
	}
	var res struct {
		Letters []hsLetter `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return nil, fmt.Errorf("dlq list: %w", err)
	}
	return res.Letters, nil
}

// hsConsumerNames are the consumers that must have parked the poison
// tenant: every checkpoint's owner (each one reads an event type the
// poison tenant wrote).
func hsConsumerNames(cps []hsCheckpoint) []string {
	var out []string
	for _, c := range cps {
		out = append(out, c.name)
	}
	return out
}

// hostileOthers judges the well-behaved tenants: latency against their
// baseline, every response 2xx, their orders in the read models and their
// fulfilment completed.
func (e *env) hostileOthers(ctx context.Context, r *Result, cfg HostileConfig, admin *pgx.Conn, load *hsLoad, reqs []hsRequest,
	others []string, baseFrom, hostileFrom, hostileTo time.Time) error {
	var base, during []time.Duration
	baseBy, duringBy := map[string][]time.Duration{}, map[string][]time.Duration{} // by kind of request
	bad, fivexx, transport, staleReads, reads := 0, 0, 0, 0, 0
	var examples []string
	for _, q := range reqs {
		switch {
		case !q.start.Before(baseFrom) && q.start.Before(hostileFrom):
			base = append(base, q.took)
			baseBy[q.kind] = append(baseBy[q.kind], q.took)
		case !q.start.Before(hostileFrom) && q.start.Before(hostileTo):
			during = append(during, q.took)
			duringBy[q.kind] = append(duringBy[q.kind], q.took)
		}
		switch {
		case q.status == 0:
			transport++
		case q.status >= 500:
			fivexx++
		}
		if q.status/100 != 2 {
			bad++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("%s %s at %s: %d %s", q.tenant, q.kind, q.start.Format("15:04:05.000"), q.status, q.err))
			}
		}
		if q.kind == "read" && q.status == http.StatusOK {
			reads++
			if q.readStatus != "paid" {
				staleReads++
			}
		}
	}
	_, p99b, maxb := percentiles(base)
	p50d, p99d, maxd := percentiles(during)
	ratio := 0.0
	if p99b > 0 {
		ratio = float64(p99d) / float64(p99b)
	}
	ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	r.check("other tenants: p99 latency in the hostile phase / in the baseline", fmt.Sprintf("<= %.1fx", cfg.MaxP99Ratio),
		fmt.Sprintf("%.2fx (%s over %d requests; baseline %s over %d)", ratio, ms(p99d), len(during), ms(p99b), len(base)),
		len(base) > 0 && len(during) > 0 && ratio <= cfg.MaxP99Ratio)
	r.note("other tenants: hostile phase p50 %s, p99 %s, max %s; baseline p99 %s, max %s", ms(p50d), ms(p99d), ms(maxd), ms(p99b), ms(maxb))
	// Which requests are slow: where to look when the ratio fails.
	var kinds []string
	for k := range duringBy {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		_, kb, _ := percentiles(baseBy[k])
		_, kd, kmax := percentiles(duringBy[k])
		r.note("other tenants: %s requests, p99 %s (max %s) over %d in the hostile phase, %s over %d in the baseline", k, ms(kd), ms(kmax), len(duringBy[k]), ms(kb), len(baseBy[k]))
	}
	// When the slowest requests of the phase began, against the hostile
	// work's schedule (the notes above say when each part ran).
	var slow []hsRequest
	for _, q := range reqs {
		if !q.start.Before(hostileFrom) && q.start.Before(hostileTo) {
			slow = append(slow, q)
		}
	}
	sort.Slice(slow, func(i, j int) bool { return slow[i].took > slow[j].took })
	var at []string
	for _, q := range slow[:min(8, len(slow))] {
		at = append(at, fmt.Sprintf("%s %s at %s", q.kind, ms(q.took), q.start.Sub(hostileFrom).Round(10*time.Millisecond)))
	}
	r.note("other tenants: slowest requests of the hostile phase (and when they began in it): %s", strings.Join(at, ", "))
	r.zero(fmt.Sprintf("other tenants: 5xx responses, 503 included (of %d requests)", len(reqs)), fivexx)
	r.zero("other tenants: responses other than 2xx, or none", bad)
	for _, x := range examples {
		r.note("other tenants: %s", x)
	}
	r.note("other tenants: %d requests without a response", transport)
	r.zero(fmt.Sprintf("other tenants: reads with the payment's consistency token not showing the order paid (of %d)", reads), staleReads)

	// Their read models, then their process instances.
	load.mu.Lock()
	created := map[string][]string{}
	paid := map[string]map[string]time.Time{}
	for t, ids := range load.created {
		created[t] = slices.Clone(ids)
	}
	for t, m := range load.paid {
		paid[t] = map[string]time.Time{}
		for id, at := range m {
			paid[t][id] = at
		}
	}
	load.mu.Unlock()
	missing, notPaid, acked, ackedPaid := 0, 0, 0, 0
	for _, t := range others {
		rows, err := admin.Query(ctx, `SELECT order_id, status FROM strata.order_details WHERE tenant_id = $1`, t)
		if err != nil {
			return err
		}
		status := map[string]string{}
		for rows.Next() {
			var id, st string
			if err := rows.Scan(&id, &st); err != nil {
				rows.Close()
				return err
			}
			status[id] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, id := range created[t] {
			acked++
			if _, ok := status[id]; !ok {
				missing++
			}
		}
		for id := range paid[t] {
			ackedPaid++
			if status[id] != "paid" {
				notPaid++
			}
		}
	}
	r.check("other tenants: acknowledged orders in the read model (order_details)", fmt.Sprintf("%d/%d", acked, acked),
		fmt.Sprintf("%d/%d", acked-missing, acked), missing == 0 && acked > 0)
	r.zero(fmt.Sprintf("other tenants: paid orders (of %d) not paid in the read model", ackedPaid), notPaid)

	// Fulfilment: every paid order's instance completes (the process
	// manager goes on for them whatever the poison tenant does).
	deadline := time.Now().Add(cfg.CatchUp)
	var done map[string]time.Time
	incomplete := 0
	var stuck []string
	for {
		done, incomplete, stuck = map[string]time.Time{}, 0, nil
		for _, t := range others {
			rows, err := admin.Query(ctx, `SELECT instance, status, updated_at FROM strata.process_instances WHERE tenant_id = $1 AND process = 'fulfilment'`, t)
			if err != nil {
				return err
			}
			st := map[string]string{}
			for rows.Next() {
				var id, s string
				var at time.Time
				if err := rows.Scan(&id, &s, &at); err != nil {
					rows.Close()
					return err
				}
				st[id] = s
				if s == "completed" {
					done[t+"/"+id] = at
				}
			}
			rows.Close()
			for id := range paid[t] {
				if st[id] != "completed" {
					incomplete++
					if len(stuck) < 5 {
						stuck = append(stuck, fmt.Sprintf("%s/%s %s", t, id, orNone(st[id])))
					}
				}
			}
		}
		if incomplete == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	r.check("other tenants: paid orders whose fulfilment completed (reserved, paid, committed)", fmt.Sprintf("%d/%d", ackedPaid, ackedPaid),
		fmt.Sprintf("%d/%d%s", ackedPaid-incomplete, ackedPaid, hsMissing(stuck)), incomplete == 0 && ackedPaid > 0)
	// How long after the payment, in each phase (the instance's last
	// update is its completion).
	var lagBase, lagHostile []time.Duration
	var lags []hsLag
	for _, t := range others {
		for id, at := range paid[t] {
			if c, ok := done[t+"/"+id]; ok {
				lags = append(lags, hsLag{t + "/" + id, at.Sub(hostileFrom), c.Sub(at)})
				if at.Before(hostileFrom) {
					lagBase = append(lagBase, c.Sub(at))
				} else {
					lagHostile = append(lagHostile, c.Sub(at))
				}
			}
		}
	}
	if err := writeHSLags(filepath.Join(e.dir, "hostile-fulfilment.jsonl"), lags); err != nil {
		return err
	}
	_, pb, mb := percentiles(lagBase)
	_, ph, mh := percentiles(lagHostile)
	r.note("other tenants: fulfilment completed after the payment: p99 %s (max %s) over %d in the baseline, p99 %s (max %s) over %d in the hostile phase and after",
		ms(pb), ms(mb), len(lagBase), ms(ph), ms(mh), len(lagHostile))
	return nil
}

// hsLag is how long after its payment an order's fulfilment completed.
type hsLag struct {
	order    string
	paid     time.Duration // since the hostile phase began
	complete time.Duration
}

// writeHSLags writes the lags, one JSON object a line, by payment time.
func writeHSLags(file string, lags []hsLag) error {
	sort.Slice(lags, func(i, j int) bool { return lags[i].paid < lags[j].paid })
	var b bytes.Buffer
	for _, l := range lags {
		fmt.Fprintf(&b, `{"order":%q,"t":%.3f,"lag_ms":%.1f}`+"\n", l.order, l.paid.Seconds(), float64(l.complete.Microseconds())/1000)
	}
	return os.WriteFile(file, b.Bytes(), 0o644)
}

// hsImport is the part of `strata tenants import --json` HOSTILE reads.
type hsImport struct {
	Events     int64             `json:"events"`
	EventIDs   string            `json:"event_ids"`
	Complete   bool              `json:"complete"`
	CaughtUp   bool              `json:"caught_up"`
	ReadModels map[string]string `json:"read_models"`
}

// hostileImports judges the copy (export, import under hsCopy) and the
// hostile imports.
func (e *env) hostileImports(ctx context.Context, r *Result, admin *pgx.Conn, msgs []brokerMessage, topic string,
	exportCode int, exportErr string, importCode int, importOut, importErr string,
	attacks []hostileArchive, hostileMarker string, refusal func(int) (int, string, string)) error {
	var imp hsImport
	parsed := json.Unmarshal([]byte(importOut), &imp) == nil
	var differs []string
	for t, v := range imp.ReadModels {
		if v != "equal" {
			differs = append(differs, t+" "+v)
		}
	}
	sort.Strings(differs)
	if exportCode != 0 {
		r.note("export of %s: exit %d: %s", hsSource, exportCode, oneLine(exportErr, 300))
	}
	if importCode != 0 {
		r.note("import as %s: exit %d: %s", hsCopy, importCode, oneLine(importErr, 300))
	}
	r.check(fmt.Sprintf("%s exported and imported as %s (complete, caught up, every read model equal to the archive's)", hsSource, hsCopy),
		"exit 0, 0, equal", fmt.Sprintf("exit %d, %d, %d read models, %d differ%s", exportCode, importCode, len(imp.ReadModels), len(differs), hsMissing(differs)),
		exportCode == 0 && importCode == 0 && parsed && imp.Complete && imp.CaughtUp && len(imp.ReadModels) > 0 && len(differs) == 0)
	src, err := hsCount(ctx, admin, `SELECT count(*) FROM strata.events WHERE tenant_id = $1`, hsSource)
	if err != nil {
		return err
	}
	cp, err := hsCount(ctx, admin, `SELECT count(*) FROM strata.events WHERE tenant_id = $1`, hsCopy)
	if err != nil {
		return err
	}
	r.check("the copy's events", fmt.Sprintf("= the source's (%d)", src), cp, cp == src && src > 0)
	shared, err := hsCount(ctx, admin, `SELECT count(*) FROM strata.events c JOIN strata.events s ON s.event_id = c.event_id
WHERE c.tenant_id = $1 AND s.tenant_id = $2`, hsCopy, hsSource)
	if err != nil {
		return err
	}
	r.check("the copy's event IDs shared with the source (derived IDs)", "0, derived", fmt.Sprintf("%d, %s", shared, orNone(imp.EventIDs)),
		shared == 0 && imp.EventIDs == "derived")
	pm, err := hsCount(ctx, admin, `SELECT (SELECT count(*) FROM strata.process_instances WHERE tenant_id = $1)
  + (SELECT count(*) FROM strata.process_steps WHERE tenant_id = $1) + (SELECT count(*) FROM strata.process_deadlines WHERE tenant_id = $1)`, hsCopy)
	if err != nil {
		return err
	}
	srcPM, err := hsCount(ctx, admin, `SELECT count(*) FROM strata.process_steps WHERE tenant_id = $1`, hsSource)
	if err != nil {
		return err
	}
	r.zero(fmt.Sprintf("the copy's process instances, steps and deadlines (the source has %d steps)", srcPM), int(pm))
	// Not published, once the relay has passed the copy's last event
	// (before it, 0 proves nothing).
	copyMsgs := hsBrokerFindings(msgs, topic, hsCopy, "\x00never\x00")
	var passed bool
	if err := admin.QueryRow(ctx, `SELECT coalesce(bool_and((c.pos_major, c.pos_minor) >= (e.tx_id::text::numeric, e.position::numeric)), false)
FROM strata.projection_checkpoints c,
     (SELECT tx_id, position FROM strata.events WHERE tenant_id = $1 ORDER BY tx_id DESC, position DESC LIMIT 1) e
WHERE c.projection = $2`, hsCopy, "relay_"+topic).Scan(&passed); err != nil {
		return err
	}
	r.check("the copy's messages in JetStream, the relay past its last event (imported history is not published)", "0, passed",
		fmt.Sprintf("%d, %s", copyMsgs.tenant, map[bool]string{true: "passed", false: "not passed"}[passed]), copyMsgs.tenant == 0 && passed)
	srcRows, err := hsCount(ctx, admin, `SELECT count(*) FROM strata.order_details WHERE tenant_id = $1`, hsSource)
	if err != nil {
		return err
	}
	cpRows, err := hsCount(ctx, admin, `SELECT count(*) FROM strata.order_details WHERE tenant_id = $1`, hsCopy)
	if err != nil {
		return err
	}
	r.check("the copy's orders in its read model (order_details)", fmt.Sprintf("= the source's (%d)", srcRows), cpRows, cpRows == srcRows && srcRows > 0)

	// The hostile imports: refused, naming what, and nothing written.
	for i, a := range attacks {
		code, out, errOut := refusal(i)
		named := strings.Contains(errOut, a.want)
		nothing := strings.Contains(errOut, "nothing was written")
		rows, err := eraseRows(ctx, admin, a.tenant)
		if err != nil {
			return err
		}
		n, tables := rowsLeft(rows)
		dir, err := hsCount(ctx, admin, `SELECT (SELECT count(*) FROM strata.tenants WHERE id = $1) + (SELECT count(*) FROM strata.tenant_arrivals WHERE tenant = $1)`, a.tenant)
		if err != nil {
			return err
		}
		r.check("hostile import refused with nothing written: "+a.name, "exit 1, names "+a.want+", 0 rows",
			fmt.Sprintf("exit %d, named %v, says nothing written %v, %d rows", code, named, nothing, n+dir), code == 1 && named && nothing && n+dir == 0)
		if code != 1 || !named || !nothing {
			r.note("hostile import %q: exit %d: stdout %s stderr %s", a.name, code, oneLine(out, 200), oneLine(errOut, 300))
		}
		if len(tables) > 0 || dir > 0 {
			r.note("hostile import %q left: %s, %d directory and arrival rows", a.name, strings.Join(tables, ", "), dir)
		}
	}
	finds, err := hsScanTables(ctx, admin, hostileMarker)
	if err != nil {
		return err
	}
	r.check("bytes of any hostile archive in any table (its marker, every column of every table)", "none",
		fmt.Sprintf("%d columns%s", len(finds), hsMissing(hsFindsStrings(finds))), len(finds) == 0)
	var audit int64
	if audit, err = hsCount(ctx, admin, `SELECT count(*) FROM strata.tenant_audit WHERE tenant LIKE $1`, hsHostP+"-%"); err != nil {
		return err
	}
	r.note("hostile imports: %d tenant_audit rows naming their tenants (an import is audited once its archive has passed the checks)", audit)
	return nil
}

// hostileBroker checks that every event of the other tenants reached
// JetStream, once.
func (e *env) hostileBroker(ctx context.Context, r *Result, admin *pgx.Conn, msgs []brokerMessage, topic string, others []string) error {
	events, missing, extra := 0, 0, 0
	for _, t := range others {
		rows, err := admin.Query(ctx, `SELECT event_id::text FROM strata.events WHERE tenant_id = $1`, t)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		seen := map[string]int{}
		for _, m := range msgs {
			if strings.HasPrefix(m.Subject, topic+"."+t+".") {
				for _, id := range m.Header["event_id"] {
					seen[id]++
				}
			}
		}
		events += len(ids)
		for _, id := range ids {
			switch n := seen[id]; {
			case n == 0:
				missing++
			case n > 1:
				extra += n - 1
			}
			delete(seen, id)
		}
		for _, n := range seen {
			extra += n
		}
	}
	r.check("other tenants' events in JetStream, each once", fmt.Sprintf("%d/%d, 0 extra", events, events),
		fmt.Sprintf("%d/%d, %d extra", events-missing, events, extra), missing == 0 && extra == 0 && events > 0)
	return nil
}
