package projections

import (
	"errors"
	"fmt"
	"slices"

	"github.com/strata-es/strata/domain/event"
)

// item is an event the projection handles, decoded, with its index in the
// batch as read from the log. err is set when it could not be decoded
// (only with DeadLetters: it is then parked).
type item struct {
	idx int
	ev  Event
	err error
}

// payload returns the decoded payload of recs[i]: the shared batch's,
// when the batch was read through SharedReads, or decoded now.
func (r *Runner) payload(i int, rec event.Record, decoded *sharedBatch) (event.Payload, error) {
	if decoded != nil {
		return decoded.payloads[i], decoded.errs[i]
	}
	return r.cfg.Registry.DecodeRecord(rec)
}

// prepare decodes the events the projection handles and groups them by
// tenant, each tenant's events keeping their log order, so that set_config
// is sent once per tenant rather than once per event of interleaved
// tenants. Reordering across tenants cannot change any row: every
// read-model row belongs to one tenant (tenant_id in every key, RLS WITH
// CHECK on every write), so a projection cannot observe another tenant's
// events.
func (r *Runner) prepare(recs []event.Record, decoded *sharedBatch) ([]item, error) {
	items := make([]item, 0, len(recs))
	for i, rec := range recs {
		if !r.handles[rec.Type] || r.cfg.Filter != nil && !r.cfg.Filter(rec) {
			continue
		}
		payload, err := r.payload(i, rec, decoded)
		if err != nil {
			if !r.cfg.DeadLetters || errors.Is(err, event.ErrUnknownType) {
				// A type the registry lacks is the process's fault, not
				// the event's: parking it would drop every event of
				// that type (and a rebuild would swap in tables without
				// their rows). Stop instead, until the registry is fixed.
				return nil, r.eventError(i, rec, err)
			}
			items = append(items, item{idx: i, ev: Event{Record: rec}, err: fmt.Errorf("decode: %w", err)})
			continue
		}
		items = append(items, item{idx: i, ev: Event{Record: rec, Payload: payload}})
	}
	// Group by tenant, stably: bucket the positions, then copy once.
	byTenant := map[string][]int{}
	var tenants []string
	for k, it := range items {
		if _, ok := byTenant[it.ev.Tenant]; !ok {
			tenants = append(tenants, it.ev.Tenant)
		}
		byTenant[it.ev.Tenant] = append(byTenant[it.ev.Tenant], k)
	}
	if len(tenants) < 2 {
		return items, nil
	}
	slices.Sort(tenants)
	grouped := make([]item, 0, len(items))
	for _, t := range tenants {
		for _, k := range byTenant[t] {
			grouped = append(grouped, items[k])
		}
	}
	return grouped, nil
}
