package subjects

import (
	"bytes"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// fieldFindings checks the subject's streams (those with an event the
// erasure's key sealed) field by field, beyond the scan for the subject's
// ID: declared fields of their events in plaintext (history written before
// the declaration), declared fields of their process instances that do not
// hold their tombstones, and free text beside them not cleared. The values
// themselves cannot be looked for: the key that could say them is gone.
func (e *Eraser) fieldFindings(ctx context.Context, tx pgx.Tx, tenant, keyID string, streams []string) ([]Finding, error) {
	if len(streams) == 0 {
		return nil, nil
	}
	var out []Finding
	if e.cfg.Registry != nil {
		rows, err := tx.Query(ctx, `SELECT event_type, data FROM events WHERE tenant_id = $1 AND stream_id = ANY($2)`, tenant, streams)
		if err != nil {
			return nil, fmt.Errorf("read the subject's streams: %w", err)
		}
		var plain int64
		var typ string
		var data []byte
		if _, err := pgx.ForEachRow(rows, []any{&typ, &data}, func() error {
			if len(event.Unsealed(data, e.cfg.Registry.Personal(typ))) > 0 {
				plain++
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read the subject's streams: %w", err)
		}
		if plain > 0 {
			out = append(out, Finding{Store: "log", Count: plain, What: "events on the subject's streams holding declared personal fields in plaintext (written before the declaration)"})
		}
	}
	pseudonym := event.PseudonymOf(keyID)
	var kept int64
	var process string
	var state, payload, result []byte
	rows, err := tx.Query(ctx, `SELECT i.process, i.state, NULL, NULL FROM process_instances i WHERE i.tenant_id = $1 AND i.stream_id = ANY($2)
UNION ALL
SELECT s.process, NULL, s.payload, s.result FROM process_steps s JOIN process_instances i USING (tenant_id, process, instance)
WHERE s.tenant_id = $1 AND i.stream_id = ANY($2)`, tenant, streams)
	if err != nil {
		return nil, fmt.Errorf("read the subject's process instances: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&process, &state, &payload, &result}, func() error {
		fields := e.cfg.Processes[process]
		for _, doc := range [][]byte{state, payload, result} {
			if red, n, err := event.Redact(doc, fields, pseudonym); err != nil || n > 0 && !bytes.Equal(red, doc) {
				kept++
				return nil
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the subject's process instances: %w", err)
	}
	if kept > 0 {
		out = append(out, Finding{Store: "process_instances", Count: kept, What: "process rows on the subject's streams whose declared personal fields do not hold their tombstones"})
	}
	var text int64
	if err := tx.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM process_history h JOIN process_instances i USING (tenant_id, process, instance)
   WHERE h.tenant_id = $1 AND i.stream_id = ANY($2) AND ((h.note <> '' AND h.note <> $3) OR h.summary ? 'reason'))
+ (SELECT count(*) FROM process_steps s JOIN process_instances i USING (tenant_id, process, instance)
   WHERE s.tenant_id = $1 AND i.stream_id = ANY($2) AND s.last_error <> $3)
+ (SELECT count(*) FROM dead_letters WHERE tenant_id = $1 AND stream_id = ANY($2) AND error <> $3)`, tenant, streams, erasedText).Scan(&text); err != nil {
		return nil, fmt.Errorf("read the free text beside the subject's data: %w", err)
	}
	if text > 0 {
		out = append(out, Finding{Store: "free_text", Count: text, What: "history notes, reasons and errors on the subject's streams not cleared"})
	}
	return out, nil
}
