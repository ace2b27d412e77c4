package esdb

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/eventstore"
)

var _ eventstore.VersionLocator = (*Store)(nil)

// LocateVersions implements eventstore.VersionLocator with one single-event
// stream read per ref. Runners only ask for streams they have no memory
// of, so this is rare once they are warm.
func (s *Store) LocateVersions(ctx context.Context, refs []eventstore.StreamVersion) ([]event.Position, []bool, error) {
	positions, found := make([]event.Position, len(refs)), make([]bool, len(refs))
	for i, ref := range refs {
		if ref.Version < 1 {
			continue
		}
		name, err := s.names.encode(ref.Tenant, ref.Stream)
		if err != nil {
			return nil, nil, fmt.Errorf("locate versions: %w", err)
		}
		op := "locate " + ref.Tenant + "/" + ref.Stream
		err = s.conn.call(ctx, op, func(c *esdb.Client) error {
			rs, err := c.ReadStream(ctx, name, esdb.ReadStreamOptions{From: esdb.Revision(uint64(ref.Version - 1))}, 1)
			if err != nil {
				return err
			}
			defer rs.Close()
			ev, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			rec, ok, err := s.names.record(ev.OriginalEvent())
			if err != nil {
				return err
			}
			if ok && rec.Version == ref.Version {
				positions[i], found[i] = rec.Position, true
			}
			return nil
		})
		if errors.Is(err, errNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return positions, found, nil
}
