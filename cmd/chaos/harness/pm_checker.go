package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/inventory/stock"
	"github.com/strata-es/strata/examples/orders/order"
	"github.com/strata-es/strata/internal/paysim"
)

// pm1Run is what PM1's checker is given.
type pm1Run struct {
	cfg    PM1Config
	url    string
	orders []*pmOrder
	prov   *recordedProvider
	hist   *history
	api    map[string]invRow // tenant/sku -> GET /v1/inventory/{sku}
	sup    *supervisor
}

type invRow struct {
	OnHand    int64 `json:"on_hand"`
	Reserved  int64 `json:"reserved"`
	Available int64 `json:"available"`
	Status    int   `json:"-"`
}

// readInventoryAPI reads every tenant's SKUs through the query API.
func readInventoryAPI(ctx context.Context, client *http.Client, base string, tokens map[string]string, skus int) (map[string]invRow, error) {
	out := map[string]invRow{}
	for tenant, tok := range tokens {
		for i := 0; i < skus; i++ {
			sku := pmSKU(i)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/inventory/"+sku, nil)
			if err != nil {
				return nil, err
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := client.Do(req)
			if err != nil {
				return nil, fmt.Errorf("GET /v1/inventory/%s: %w", sku, err)
			}
			raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
			res.Body.Close()
			row := invRow{Status: res.StatusCode}
			if res.StatusCode == http.StatusOK {
				if err := json.Unmarshal(raw, &row); err != nil {
					return nil, fmt.Errorf("GET /v1/inventory/%s: %w", sku, err)
				}
			}
			out[tenant+"/"+sku] = row
		}
	}
	return out, nil
}

// pmEvent is one log event with its payload.
type pmEvent struct {
	Tenant, Stream, Type, CommandID string
	Version                         int64
	Data                            []byte
}

// terminalStatuses are the fulfilment statuses that are Done.
var terminalStatuses = []string{"completed", "cancelled", "paid_unfulfilled", "void_refused", "untracked"}

// orderFacts is what the log says about one order.
type orderFacts struct {
	placedAt   time.Time
	placed     int
	paid       []string // payment references
	cancelled  []string // reasons
	lines      map[string]int64
	status     string // the instance's
	done       bool
	parked     bool
	doneAt     time.Time
	hasInst    bool
	reserveOut map[string]string // sku -> open|released|committed
}

// reservationFacts is one reservation of one SKU, from the log.
type reservationFacts struct {
	reserved, released, committed int64
	nReserved, nClosed            int
}

func (e *env) checkPM1(ctx context.Context, r *Result, run pm1Run) error {
	conn, err := connectAdmin(ctx, run.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT tenant_id, stream_id, version, event_type, data::text, coalesce(metadata->>'command_id', '')
FROM events ORDER BY tenant_id, stream_id, version`)
	if err != nil {
		return err
	}
	var events []pmEvent
	for rows.Next() {
		var ev pmEvent
		var data string
		if err := rows.Scan(&ev.Tenant, &ev.Stream, &ev.Version, &ev.Type, &data, &ev.CommandID); err != nil {
			rows.Close()
			return err
		}
		ev.Data = []byte(data)
		events = append(events, ev)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// The payment references are personal data, sealed in the log: the
	// checker reads them opened, with the database's keys.
	reg := openingRegistry(ctx, conn)
	for i, ev := range events {
		opened, err := reg.Open(event.Record{Tenant: ev.Tenant, Stream: ev.Stream, Type: ev.Type, Data: ev.Data})
		if err != nil {
			return fmt.Errorf("open %s v%d of %s: %w", ev.Type, ev.Version, ev.Stream, err)
		}
		events[i].Data = opened
	}

	// 1. The clients' commands: each acknowledged one in the log once.
	byCommand := map[string]int{}
	for _, ev := range events {
		byCommand[ev.CommandID]++
	}
	var lost, dup, rejectedApplied, unresolved, okOps, failOps int
	var histEx []string
	ops := run.hist.Ops()
	for _, op := range ops {
		n := byCommand[commandID(op.Tenant, op.Key)]
		switch op.Outcome {
		case OK:
			okOps++
			if n == 0 {
				lost++
				histEx = append(histEx, fmt.Sprintf("LOST: %s %s of %s acknowledged, no event has its command id", op.Kind, op.Key, op.Tenant))
			}
		case Fail:
			failOps++
			if n > 0 {
				rejectedApplied++
				histEx = append(histEx, fmt.Sprintf("REJECTED BUT APPLIED: %s %s of %s answered %d %s", op.Kind, op.Key, op.Tenant, op.Status, op.Code))
			}
		default:
			unresolved++
		}
		if n > 1 {
			dup++
			histEx = append(histEx, fmt.Sprintf("DUPLICATED: %s %s of %s: %d events", op.Kind, op.Key, op.Tenant, n))
		}
	}
	r.zero("acknowledged client commands lost", lost)
	r.zero("client commands applied more than once", dup)
	r.zero("rejected client commands with events", rejectedApplied)
	r.zero("client commands unresolved after their retries", unresolved)
	r.note("clients: %d commands (%d ok, %d rejected, %d unresolved)", len(ops), okOps, failOps, unresolved)

	// 2. The orders and the stock, from the log.
	facts := map[string]*orderFacts{} // tenant/order
	fact := func(tenant, id string) *orderFacts {
		k := tenant + "/" + id
		f := facts[k]
		if f == nil {
			f = &orderFacts{lines: map[string]int64{}, reserveOut: map[string]string{}}
			facts[k] = f
		}
		return f
	}
	received := map[string]int64{}                    // tenant/sku
	resv := map[string]map[string]*reservationFacts{} // tenant/sku -> reservation
	var badEvents []string
	for _, ev := range events {
		switch {
		case strings.HasPrefix(ev.Type, "order."):
			id, ok := order.OrderIDFromStream(ev.Stream)
			if !ok {
				continue
			}
			f := fact(ev.Tenant, id)
			switch ev.Type {
			case order.TypeLineAdded:
				var p order.LineAdded
				if json.Unmarshal(ev.Data, &p) == nil {
					f.lines[p.ProductID] += p.Quantity
				}
			case order.TypeLineRemoved:
				var p order.LineRemoved
				if json.Unmarshal(ev.Data, &p) == nil {
					delete(f.lines, p.ProductID)
				}
			case order.TypePlaced:
				var p order.Placed
				if json.Unmarshal(ev.Data, &p) == nil {
					f.placedAt = p.At
				}
				f.placed++
			case order.TypePaid:
				var p order.Paid
				_ = json.Unmarshal(ev.Data, &p)
				f.paid = append(f.paid, p.PaymentReference)
			case order.TypeCancelled:
				var p order.Cancelled
				_ = json.Unmarshal(ev.Data, &p)
				f.cancelled = append(f.cancelled, p.Reason)
			}
		case strings.HasPrefix(ev.Type, "inventory."):
			sku, ok := stock.SKUFromStream(ev.Stream)
			if !ok {
				continue
			}
			k := ev.Tenant + "/" + sku
			var p struct {
				ReservationID string `json:"reservation_id"`
				Quantity      int64  `json:"quantity"`
			}
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				return fmt.Errorf("%s %s v%d: %w", ev.Type, ev.Stream, ev.Version, err)
			}
			if ev.Type == stock.TypeReceived {
				received[k] += p.Quantity
				continue
			}
			if resv[k] == nil {
				resv[k] = map[string]*reservationFacts{}
			}
			rf := resv[k][p.ReservationID]
			if rf == nil {
				rf = &reservationFacts{}
				resv[k][p.ReservationID] = rf
			}
			switch ev.Type {
			case stock.TypeReserved:
				rf.reserved += p.Quantity
				rf.nReserved++
			case stock.TypeReleased:
				rf.released += p.Quantity
				rf.nClosed++
			case stock.TypeCommitted:
				rf.committed += p.Quantity
				rf.nClosed++
			}
			if rf.nReserved > 1 || rf.nClosed > 1 || (rf.nClosed > 0 && rf.nReserved == 0) {
				badEvents = append(badEvents, fmt.Sprintf("reservation %s of %s: %d reserved, %d closed events", p.ReservationID, k, rf.nReserved, rf.nClosed))
			}
			f := fact(ev.Tenant, p.ReservationID)
			switch ev.Type {
			case stock.TypeReserved:
				f.reserveOut[sku] = "open"
			case stock.TypeReleased:
				f.reserveOut[sku] = "released"
			case stock.TypeCommitted:
				f.reserveOut[sku] = "committed"
			}
		}
	}

	// Stock conserved per SKU, and the query API agrees with the log.
	var notConserved, apiDiffers, heldUnits int64
	var stockEx []string
	for tenant := range run.hist.tenantsOf() {
		for i := 0; i < run.cfg.SKUs; i++ {
			sku := pmSKU(i)
			k := tenant + "/" + sku
			var committed, open int64
			for _, rf := range resv[k] {
				committed += rf.committed
				o := rf.reserved - rf.released - rf.committed
				if o < 0 {
					notConserved++
					stockEx = append(stockEx, fmt.Sprintf("%s: a reservation closed for more than it held", k))
				}
				open += o
			}
			onHand := received[k] - committed
			if onHand < 0 || open < 0 || onHand-open < 0 {
				notConserved++
				stockEx = append(stockEx, fmt.Sprintf("%s: on_hand %d, reserved %d from the log", k, onHand, open))
			}
			heldUnits += open
			a, ok := run.api[k]
			if !ok || a.Status != http.StatusOK || a.OnHand != onHand || a.Reserved != open || a.Available != onHand-open {
				apiDiffers++
				stockEx = append(stockEx, fmt.Sprintf("%s: log on_hand %d reserved %d; GET /v1/inventory/%s %d on_hand %d reserved %d available %d",
					k, onHand, open, sku, a.Status, a.OnHand, a.Reserved, a.Available))
			}
		}
	}
	var totRecv, totComm int64
	for k, v := range received {
		totRecv += v
		for _, rf := range resv[k] {
			totComm += rf.committed
		}
	}
	r.note("stock: %d SKUs over %d tenants; %d units received, %d committed, %d reservations", len(received), len(run.hist.tenantsOf()), totRecv, totComm, func() int {
		n := 0
		for _, m := range resv {
			n += len(m)
		}
		return n
	}())
	r.zero("SKUs whose stock is not conserved (on_hand = received - committed, reserved = open reservations, never negative)", int(notConserved))
	r.zero("SKUs where GET /v1/inventory/{sku} differs from the log", int(apiDiffers))
	r.zero("reservations reserved or closed more than once", len(badEvents))
	r.zero("units still reserved once every instance is terminal", int(heldUnits))
	for i, ex := range append(stockEx, badEvents...) {
		if i == 8 {
			break
		}
		r.note("STOCK: %s", ex)
	}

	// 3. The instances.
	irows, err := conn.Query(ctx, `SELECT tenant_id, instance, status, done, parked FROM process_instances WHERE process = 'fulfilment'`)
	if err != nil {
		return err
	}
	for irows.Next() {
		var tenant, inst, status string
		var done, parked bool
		if err := irows.Scan(&tenant, &inst, &status, &done, &parked); err != nil {
			irows.Close()
			return err
		}
		f := fact(tenant, inst)
		f.status, f.done, f.parked, f.hasInst = status, done, parked, true
	}
	irows.Close()
	if err := irows.Err(); err != nil {
		return err
	}
	hrows, err := conn.Query(ctx, `SELECT tenant_id, instance, min(at) FROM process_history
WHERE process = 'fulfilment' AND status_after = ANY($1) GROUP BY tenant_id, instance`, terminalStatuses)
	if err != nil {
		return err
	}
	for hrows.Next() {
		var tenant, inst string
		var at time.Time
		if err := hrows.Scan(&tenant, &inst, &at); err != nil {
			hrows.Close()
			return err
		}
		fact(tenant, inst).doneAt = at
	}
	hrows.Close()
	if err := hrows.Err(); err != nil {
		return err
	}

	// The read model of fulfilment per order: once every instance is
	// terminal, its stage is the instance's status and its payment
	// reference the order's.
	type rmRow struct {
		stage, ref string
		reserved   int
	}
	rm := map[string]rmRow{}
	rrows, err := conn.Query(ctx, `SELECT tenant_id, order_id, stage, coalesce(payment_reference, ''), reserved FROM order_fulfilment`)
	if err != nil {
		return err
	}
	for rrows.Next() {
		var tenant, id string
		var row rmRow
		if err := rrows.Scan(&tenant, &id, &row.stage, &row.ref, &row.reserved); err != nil {
			rrows.Close()
			return err
		}
		rm[tenant+"/"+id] = row
	}
	rrows.Close()
	if err := rrows.Err(); err != nil {
		return err
	}
	rmDiffers := 0
	var neverHeld []string
	for k, f := range facts {
		if !f.hasInst {
			continue
		}
		row, ok := rm[k]
		ref := ""
		if len(f.paid) > 0 {
			ref = f.paid[0]
		}
		if ok && f.status == "paid_unfulfilled" && row.stage == "committing" && row.reserved == 0 && row.ref == ref {
			// A known gap of the read model: paid, and every line refused
			// by inventory. The log has no event for a refused
			// reservation, so nothing after order.paid tells the
			// projection that nothing will be committed.
			neverHeld = append(neverHeld, k)
			continue
		}
		if !ok || row.stage != f.status || row.ref != ref {
			rmDiffers++
			if rmDiffers <= 5 {
				r.note("READ MODEL: %s: order_fulfilment stage %q reference %q (row %v), instance %s, paid with %q", k, row.stage, row.ref, ok, f.status, ref)
			}
		}
	}
	r.zero("orders whose order_fulfilment row (stage, payment reference) differs from the instance and the log (but the gap below)", rmDiffers)
	if len(neverHeld) > 0 {
		sort.Strings(neverHeld)
		r.note("KNOWN GAP: %d order(s) paid by hand with every line refused (out of stock) are paid_unfulfilled but stay stage committing in order_fulfilment for good (no event says a reservation was refused): %s",
			len(neverHeld), strings.Join(neverHeld, ", "))
	}

	// 4. The provider's ledger against the log.
	led := run.prov.sim.Ledger()
	keyOf := func(tenant, id string) string { return tenant + "/pm:fulfilment:" + id + ":capture" }
	keys := map[string]paysim.Key{}
	for _, k := range led.Keys {
		keys[k.Key] = k
	}
	entries := map[string]int{}
	for _, en := range led.Entries {
		if en.Kind == paysim.EntryCapture {
			entries[en.Key]++
		}
	}
	var (
		paidProvider, paidHand, cancelledN, paidTwice, paidNoCapture, cancelledKept, handKept int
		unsettled, statusMismatch, parked, noInstance, captureTwice, voidRefused              int
		orderEx                                                                               []string
	)
	reasons := map[string]int{}
	statuses := map[string]int{}
	var lat []time.Duration
	var slowest time.Duration
	slowestOrder := ""
	ex := func(format string, args ...any) {
		if len(orderEx) < 12 {
			orderEx = append(orderEx, fmt.Sprintf(format, args...))
		}
	}
	orderKeys := make([]string, 0, len(facts))
	for k := range facts {
		orderKeys = append(orderKeys, k)
	}
	sort.Strings(orderKeys)
	for _, ok := range orderKeys {
		f := facts[ok]
		tenant, id, _ := strings.Cut(ok, "/")
		if f.placed == 0 && !f.hasInst {
			continue // an inventory reservation of no order (none expected)
		}
		statuses[f.status]++
		key := keyOf(tenant, id)
		pk, seen := keys[key]
		kept := seen && pk.Status == paysim.StatusCaptured
		if entries[key] > 1 {
			captureTwice++
			ex("CAPTURED TWICE: %s: %d capture entries under %s", ok, entries[key], key)
		}
		if !f.hasInst {
			noInstance++
			ex("NO INSTANCE: %s has no fulfilment instance", ok)
		}
		if f.parked {
			parked++
			ex("PARKED: %s (status %s)", ok, f.status)
		}
		if f.status == "void_refused" {
			voidRefused++
		}
		if len(f.paid) > 1 || (len(f.paid) > 0 && len(f.cancelled) > 0) || len(f.cancelled) > 1 {
			paidTwice++
			ex("PAID TWICE: %s: paid %v, cancelled %v", ok, f.paid, f.cancelled)
		}
		switch {
		case len(f.paid) > 0:
			ref := f.paid[0]
			if strings.HasPrefix(ref, "hand-") {
				paidHand++
				if kept {
					handKept++
					ex("DOUBLE CHARGE: %s paid by hand (%s), yet our capture %s is kept", ok, ref, pk.CaptureID)
				}
				if f.status != "completed" && f.status != "paid_unfulfilled" {
					statusMismatch++
					ex("STATUS: %s paid by hand, instance %s", ok, f.status)
				}
			} else {
				paidProvider++
				if !kept || pk.CaptureID != ref || led.Kept(id) != 1 {
					paidNoCapture++
					ex("PAID WITHOUT ITS CAPTURE: %s paid with %s; key %s status %q capture %q, kept %d", ok, ref, key, pk.Status, pk.CaptureID, led.Kept(id))
				}
				if f.status != "completed" {
					statusMismatch++
					ex("STATUS: %s paid through the provider, instance %s (want completed: the capture starts once every line is held)", ok, f.status)
				}
			}
		case len(f.cancelled) > 0:
			cancelledN++
			reasons[f.cancelled[0]]++
			if kept || led.Kept(id) != 0 {
				cancelledKept++
				ex("CANCELLED BUT CHARGED: %s cancelled (%s), capture %s kept", ok, f.cancelled[0], pk.CaptureID)
			}
			if f.status != "cancelled" {
				statusMismatch++
				ex("STATUS: %s cancelled, instance %s", ok, f.status)
			}
		default:
			unsettled++
			ex("UNSETTLED: %s placed %d, neither paid nor cancelled; instance %s", ok, f.placed, f.status)
			if kept {
				cancelledKept++
			}
		}
		// Stock per order: completed -> every line committed with its
		// quantity; otherwise nothing of it committed or held.
		for sku := range f.lines {
			st := f.reserveOut[sku]
			switch {
			case f.status == "completed" && st != "committed":
				statusMismatch++
				ex("STOCK OF ORDER: %s completed, its line %s is %q", ok, sku, st)
			case f.status != "completed" && (st == "open" || st == "committed"):
				statusMismatch++
				ex("STOCK OF ORDER: %s %s, its line %s is %q", ok, f.status, sku, st)
			}
		}
		if f.done && !f.placedAt.IsZero() && !f.doneAt.IsZero() {
			d := f.doneAt.Sub(f.placedAt)
			lat = append(lat, d)
			if d > slowest {
				slowest, slowestOrder = d, fmt.Sprintf("%s (%s)", ok, f.status)
			}
		}
	}
	// Every kept capture in the ledger, whatever its key: the order it
	// names was paid with exactly it.
	paidWith := map[string]string{} // order ID (unique across tenants) -> reference
	for k, f := range facts {
		if len(f.paid) > 0 {
			_, id, _ := strings.Cut(k, "/")
			paidWith[id] = f.paid[0]
		}
	}
	strayKept := 0
	for _, k := range led.Keys {
		if k.Status == paysim.StatusCaptured && paidWith[k.OrderID] != k.CaptureID {
			strayKept++
			ex("STRAY CAPTURE: %s kept under %s (order %s paid with %q)", k.CaptureID, k.Key, k.OrderID, paidWith[k.OrderID])
		}
	}
	r.zero("kept captures in the ledger that no order was paid with", strayKept)
	r.zero("orders paid through the provider without exactly one kept capture (theirs)", paidNoCapture)
	r.zero("cancelled or unpaid orders with a capture kept", cancelledKept)
	r.zero("orders paid by hand with our capture kept too (a double charge)", handKept)
	r.zero("capture keys with more than one capture in the provider's ledger", captureTwice)
	r.zero("orders paid twice, or paid and cancelled (order.paid/cancelled per stream)", paidTwice)
	r.zero("placed orders neither paid nor cancelled", unsettled)
	r.zero("instances whose status or stock disagrees with the order", statusMismatch)
	r.zero("instances parked, void_refused, or missing", parked+voidRefused+noInstance)
	r.check("orders paid through the provider, paid by hand, cancelled", "> 0 each",
		fmt.Sprintf("%d, %d, %d", paidProvider, paidHand, cancelledN), paidProvider > 0 && paidHand > 0 && cancelledN > 0)
	r.check("cancel reasons seen: customer, out_of_stock, payment_declined, payment_timeout", "all four",
		formatCounts(reasons), reasons["customer"] > 0 && reasons["out_of_stock"] > 0 && reasons["payment_declined"] > 0 && reasons["payment_timeout"] > 0)
	r.note("instances by status: %s", formatCounts(statuses))
	for _, x := range orderEx {
		r.note("%s", x)
	}
	limit := run.cfg.PaymentTimeout + run.cfg.Bound
	p50, p99, _ := percentiles(lat)
	r.within("slowest instance from its order's placing to terminal (payment timeout + bound)", limit, slowest, len(lat) > 0 && len(lat) == len(run.orders))
	r.note("placed -> terminal over %d instances: p50 %s, p99 %s, max %s (%s), i.e. at most %s past the payment deadline", len(lat), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		slowest.Round(time.Millisecond), slowestOrder, max(slowest-run.cfg.PaymentTimeout, 0).Round(time.Millisecond))

	// 5. The provider's faults, and the answers that reached strata but
	// were not recorded.
	var n503, n504, dropped, declined402, slow int
	answered := map[string]bool{} // capture keys answered 201
	reasked := map[string]bool{}
	for _, c := range run.prov.Calls() {
		switch {
		case c.Dropped:
			dropped++
		case c.Status == http.StatusServiceUnavailable:
			n503++
		case c.Status == http.StatusGatewayTimeout:
			n504++
		case c.Status == http.StatusPaymentRequired:
			declined402++
		}
		if c.Late && !c.Dropped && c.Status != http.StatusGatewayTimeout {
			slow++ // answered (with its effect) after the caller gave up
		}
		if c.Op != "capture" {
			continue
		}
		if answered[c.Key] {
			reasked[c.Key] = true
		}
		if c.Status == http.StatusCreated && !c.Dropped && !c.Late {
			answered[c.Key] = true
		}
	}
	r.check("provider faults met: 503, held past the timeout, slower than the timeout, answer dropped, declined", "> 0 each",
		fmt.Sprintf("%d, %d, %d, %d, %d", n503, n504, slow, dropped, declined402), n503 > 0 && n504 > 0 && slow > 0 && dropped > 0 && declined402 > 0)
	r.check("captures answered 201 in time, then asked again with their key (the answer not recorded: killed, or the lease lost, first)", ">= 1", len(reasked), len(reasked) >= 1)
	keyStatus := map[string]int{}
	for _, k := range led.Keys {
		keyStatus[k.Status]++
	}
	r.note("provider: %d requests, %d answered by a fault, %d replays by key; %d ledger entries; keys by status: %s",
		led.Requests, led.Faults, led.Replays, len(led.Entries), formatCounts(keyStatus))

	// 6. Deadline accuracy.
	drows, err := conn.Query(ctx, `SELECT tenant_id, instance, status, due_at, fired_at FROM process_deadlines WHERE process = 'fulfilment'`)
	if err != nil {
		return err
	}
	type dl struct {
		status     string
		due, fired time.Time
	}
	var dls []dl
	for drows.Next() {
		var tenant, inst, status string
		var due time.Time
		var fired *time.Time
		if err := drows.Scan(&tenant, &inst, &status, &due, &fired); err != nil {
			drows.Close()
			return err
		}
		d := dl{status: status, due: due}
		if fired != nil {
			d.fired = *fired
		}
		dls = append(dls, d)
	}
	drows.Close()
	if err := drows.Err(); err != nil {
		return err
	}
	var all, calm []time.Duration
	lags := []string{"due\tfired\tlag_ms"}
	pending := 0
	var disturbances []time.Time // a projector-capable process went away
	for _, ev := range run.sup.Events() {
		if ev.Kind != "start" && strings.Contains(ev.Proc, "serve") && !strings.HasSuffix(ev.Proc, "serve2") {
			disturbances = append(disturbances, ev.At)
		}
	}
	for _, d := range dls {
		if d.status == "pending" {
			pending++
		}
		if d.status != "fired" {
			continue
		}
		lag := d.fired.Sub(d.due)
		all = append(all, lag)
		lags = append(lags, fmt.Sprintf("%s\t%s\t%.3f", d.due.Format(time.RFC3339Nano), d.fired.Format(time.RFC3339Nano), lag.Seconds()*1000))
		disturbed := false
		for _, t := range disturbances {
			if !t.Before(d.due.Add(-4*time.Second)) && !t.After(d.fired) {
				disturbed = true
				break
			}
		}
		if !disturbed {
			calm = append(calm, lag)
		}
	}
	// The raw lags, to pool runs (docs/fulfilment.md).
	if err := os.WriteFile(filepath.Join(e.dir, "chaos_pm1-deadlines.tsv"), []byte(strings.Join(lags, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	r.zero("deadlines still pending once every instance is terminal", pending)
	r.check("payment deadlines fired under load", "> 0", len(all), len(all) > 0)
	a50, a99, amax := percentiles(all)
	c50, c99, cmax := percentiles(calm)
	r.note("DEADLINE ACCURACY (fired - due, process_deadlines): %d fired of %d set: p50 %s, p99 %s, max %s; the %d with no projector-capable process killed or restarted from due-4s to firing: p50 %s, p99 %s, max %s",
		len(all), len(dls), a50.Round(time.Millisecond), a99.Round(time.Millisecond), amax.Round(time.Millisecond),
		len(calm), c50.Round(time.Millisecond), c99.Round(time.Millisecond), cmax.Round(time.Millisecond))

	// 7. No 5xx but 503 to the clients.
	internal := 0
	st := map[string]int{}
	for _, a := range run.hist.attempts() {
		k := fmt.Sprint(a.Status)
		if a.Status == 0 {
			k = a.Err
		}
		st[k]++
		if a.Status >= 500 && a.Status != http.StatusServiceUnavailable {
			internal++
		}
	}
	r.zero("5xx responses other than 503", internal)
	r.note("client attempt outcomes: %s", formatCounts(st))
	for i, x := range histEx {
		if i == 8 {
			break
		}
		r.note("%s", x)
	}
	return nil
}

// tenantsOf returns the tenants of the history's operations.
func (h *history) tenantsOf() map[string]bool {
	out := map[string]bool{}
	for _, op := range h.Ops() {
		out[op.Tenant] = true
	}
	return out
}

// percentiles returns p50, p99 and max of ds (nearest rank).
func percentiles(ds []time.Duration) (p50, p99, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return rank(0.50), rank(0.99), s[len(s)-1]
}
