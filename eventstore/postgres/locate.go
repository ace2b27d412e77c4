package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

var _ eventstore.VersionLocator = (*Store)(nil)

// LocateVersions implements eventstore.VersionLocator with one indexed
// probe per ref, all in one statement, as the projector role (which reads
// the whole log through the events_projector_read_all policy).
func (s *Store) LocateVersions(ctx context.Context, refs []eventstore.StreamVersion) ([]event.Position, []bool, error) {
	if s.projector == nil {
		return nil, nil, errors.New("locate versions: store opened without a projector pool")
	}
	tenants, streams, versions := make([]string, len(refs)), make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		tenants[i], streams[i], versions[i] = r.Tenant, r.Stream, r.Version
	}
	rows, err := s.projector.Query(ctx, `SELECT q.ord, e.tx_id::text AS tx_text, e.position
FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS q(tenant_id, stream_id, version, ord)
JOIN events e ON e.tenant_id = q.tenant_id AND e.stream_id = q.stream_id AND e.version = q.version`, tenants, streams, versions)
	if err != nil {
		return nil, nil, translate("locate versions", err)
	}
	defer rows.Close()
	positions, found := make([]event.Position, len(refs)), make([]bool, len(refs))
	for rows.Next() {
		var ord, pos int64
		var tx string
		if err := rows.Scan(&ord, &tx, &pos); err != nil {
			return nil, nil, translate("locate versions", err)
		}
		major, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("locate versions: parse tx id %q: %w", tx, err)
		}
		positions[ord-1] = event.Position{Major: major, Minor: uint64(pos)}
		found[ord-1] = true
	}
	if err := rows.Err(); err != nil {
		return nil, nil, translate("locate versions", err)
	}
	return positions, found, nil
}
