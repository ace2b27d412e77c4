package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/eventstore"
)

var _ eventstore.MultiAppender = (*Store)(nil)

// AppendMulti implements eventstore.MultiAppender: one explicit
// transaction whose first statement takes every stream's lock in ascending
// lock-id order (groupLockSQL: the order groups take theirs, and a single
// append holds one, so no two transactions wait on each other in a cycle),
// before anything assigns it an xid; then each stream's append checks its
// expectation under those locks. A failed expectation rolls everything
// back. The events of all the streams become visible at once, at the
// commit, in the request's order.
func (s *Store) AppendMulti(ctx context.Context, req eventstore.MultiAppendRequest) (eventstore.MultiAppendResult, error) {
	encs, err := validateMulti(req)
	if err != nil {
		return eventstore.MultiAppendResult{}, err
	}
	op := fmt.Sprintf("append to %d streams", len(req.Streams))
	var locks []string
	for i, sa := range req.Streams {
		locks = append(locks, req.Tenant+"/"+sa.Stream)
		locks = append(locks, encs[i].locks...)
	}
	cond, err := encodeCondition(req.Condition)
	if err != nil {
		return eventstore.MultiAppendResult{}, err
	}
	if req.Condition != nil {
		for _, t := range req.Condition.Query.Tags() {
			locks = append(locks, tagLock(req.Tenant, t))
		}
	}
	var out eventstore.MultiAppendResult
	var conflict string // the stream whose expectation failed
	err = pgx.BeginTxFunc(ctx, s.app, pgx.TxOptions{}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(groupLockSQL, locks, req.Tenant)
		if cond != nil {
			b.Queue(multiConditionSQL, req.Tenant, cond.items, cond.tx, cond.pos, cond.tags)
		}
		for i, sa := range req.Streams {
			enc := encs[i]
			b.Queue(appendSQL, req.Tenant, sa.Stream, int64(sa.Expected), enc.ids, enc.types, enc.svs, enc.datas, enc.metas)
		}
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		if cond != nil {
			var holds bool
			if err := br.QueryRow().Scan(&holds); err != nil {
				return err
			}
			if !holds {
				return errCondition
			}
		}
		out.Streams = make([]eventstore.AppendResult, len(req.Streams))
		for i, sa := range req.Streams {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			res, err := scanAppended(rows, len(sa.Events))
			if errors.Is(err, errExpectation) {
				conflict = fmt.Sprintf("stream %s is not at %s", sa.Stream, sa.Expected)
				return err
			}
			if err != nil {
				return err
			}
			out.Streams[i] = res
			if out.Position.Less(res.Position) {
				out.Position = res.Position
			}
		}
		if err := br.Close(); err != nil {
			return err
		}
		if req.Idempotency == nil {
			return nil
		}
		resp, err := req.Idempotency.Response(out)
		if err != nil {
			return fmt.Errorf("build idempotent response: %w", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash, response) VALUES ($1, $2, $3, $4)`,
			req.Tenant, req.Idempotency.Key, req.Idempotency.RequestHash, resp)
		return err
	})
	if conflict != "" {
		op += ": " + conflict
	}
	if err != nil {
		return eventstore.MultiAppendResult{}, translate(op, err)
	}
	if s.onAppend != nil {
		s.onAppend()
	}
	return out, nil
}

// multiConditionSQL is true when the append condition of tenant $1 holds
// ($2 its items, $3 and $4 its position, $5 its tags, as a condition
// binds them); it runs under the locks, before the appends.
var multiConditionSQL = `WITH p AS MATERIALIZED (SELECT ` + fmt.Sprintf(conditionAfterSQL, "$3::text", "$4::bigint", "$5::text") + `)
SELECT NOT ` + fmt.Sprintf(conditionFailsSQL, "$2::jsonb", "p.after_tx", "p.after_pos", "p.after_tags") + ` FROM p`

// validateMulti checks a multi-stream append as validate checks each of
// its streams, and that the streams are distinct, and encodes them.
func validateMulti(req eventstore.MultiAppendRequest) ([]encoded, error) {
	if req.Tenant == "" {
		return nil, eventstore.ErrNoTenant
	}
	if len(req.Streams) == 0 {
		return nil, fmt.Errorf("%w: no streams", ErrInvalidAppend)
	}
	seen := make(map[string]bool, len(req.Streams))
	encs := make([]encoded, len(req.Streams))
	for i, sa := range req.Streams {
		if seen[sa.Stream] {
			return nil, fmt.Errorf("%w: stream %s twice (append its events in one part)", ErrInvalidAppend, sa.Stream)
		}
		seen[sa.Stream] = true
		one := eventstore.AppendRequest{Tenant: req.Tenant, Stream: sa.Stream, Expected: sa.Expected, Events: sa.Events}
		if err := validate(one); err != nil {
			return nil, err
		}
		enc, err := encode(one)
		if err != nil {
			return nil, err
		}
		encs[i] = enc
	}
	return encs, nil
}
