package subjects

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain/event"
)

// Plaintext kept outside the log. The log, its dead-letter copies and the
// broker's messages hold a subject's fields sealed, so destroying the key
// shreds them where they lie. Two stores hold what was opened, in
// plaintext, and are redacted in place instead: the instances of process
// managers (their state and step payloads copy the fields they decide
// on), and the free text beside them (history notes, refusal reasons,
// errors), which may quote a field and which nothing can read for one.
// Both are found through the subject's streams: those with an event the
// key sealed.

// erasedText replaces free text that may quote the subject.
const erasedText = event.ErasedText

// subjectStreams returns the tenant's streams holding an event whose
// fields keyID sealed.
func subjectStreams(ctx context.Context, tx pgx.Tx, tenant, keyID string) ([]string, error) {
	if keyID == "" {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT stream_id FROM events WHERE tenant_id = $1 AND strpos(data::text, $2) > 0`, tenant, keyID)
	if err != nil {
		return nil, fmt.Errorf("find the subject's streams: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// redactDeadLetterErrors replaces the error text of the dead letters of
// the subject's streams (a projection's or a process's error may quote an
// opened field); their data is the log's, sealed.
func redactDeadLetterErrors(ctx context.Context, tx pgx.Tx, tenant string, streams []string) (int64, error) {
	if len(streams) == 0 {
		return 0, nil
	}
	tag, err := tx.Exec(ctx, `UPDATE dead_letters SET error = $3 WHERE tenant_id = $1 AND stream_id = ANY($2) AND error <> $3`,
		tenant, streams, erasedText)
	if err != nil {
		return 0, fmt.Errorf("redact the dead letters' errors: %w", err)
	}
	return tag.RowsAffected(), nil
}

// redactProcesses tombstones the declared personal fields (personal: by
// process name) of the state and the step payloads and results of every
// process instance on the subject's streams, and clears the instances'
// free text. Each instance is locked as the process runner locks it, so a
// decision in flight commits before the redaction or reads its result,
// and each is marked with the pseudonym (erased_as), which makes the
// process runtime redact what it writes of the instance afterwards. It
// returns how many instances it redacted.
func redactProcesses(ctx context.Context, tx pgx.Tx, tenant string, streams []string, personal map[string][]event.PersonalField, pseudonym string) (int64, error) {
	if len(streams) == 0 {
		return 0, nil
	}
	type instance struct {
		process, id string
		state       []byte
	}
	rows, err := tx.Query(ctx, `SELECT process, instance, state FROM process_instances
WHERE tenant_id = $1 AND stream_id = ANY($2) ORDER BY process, instance FOR UPDATE`, tenant, streams)
	if err != nil {
		return 0, fmt.Errorf("lock the subject's process instances: %w", err)
	}
	instances, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (instance, error) {
		var i instance
		return i, r.Scan(&i.process, &i.id, &i.state)
	})
	if err != nil {
		return 0, fmt.Errorf("lock the subject's process instances: %w", err)
	}
	for _, in := range instances {
		fields := personal[in.process]
		if err := redactInstance(ctx, tx, tenant, in.process, in.id, in.state, fields, pseudonym); err != nil {
			return 0, fmt.Errorf("redact instance %s of %s: %w", in.id, in.process, err)
		}
	}
	return int64(len(instances)), nil
}

func redactInstance(ctx context.Context, tx pgx.Tx, tenant, process, id string, state []byte, fields []event.PersonalField, pseudonym string) error {
	state, _, err := event.Redact(state, fields, pseudonym)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	// erased_as: the runtime redacts what it writes of the instance from
	// now on (a step in flight, a decision made with a key still cached).
	if _, err := tx.Exec(ctx, `UPDATE process_instances SET state = $4, erased_as = $5 WHERE tenant_id = $1 AND process = $2 AND instance = $3`,
		tenant, process, id, state, pseudonym); err != nil {
		return err
	}
	type step struct {
		name            string
		payload, result []byte
	}
	rows, err := tx.Query(ctx, `SELECT step, payload, result FROM process_steps WHERE tenant_id = $1 AND process = $2 AND instance = $3`,
		tenant, process, id)
	if err != nil {
		return err
	}
	steps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (step, error) {
		var s step
		return s, r.Scan(&s.name, &s.payload, &s.result)
	})
	if err != nil {
		return err
	}
	for _, s := range steps {
		payload, n, err := event.Redact(s.payload, fields, pseudonym)
		if err != nil {
			return fmt.Errorf("step %s: payload: %w", s.name, err)
		}
		result, m, err := event.Redact(s.result, fields, pseudonym)
		if err != nil {
			return fmt.Errorf("step %s: result: %w", s.name, err)
		}
		if n+m == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, `UPDATE process_steps SET payload = $5, result = $6
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND step = $4`, tenant, process, id, s.name, payload, result); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE process_steps SET last_error = $4
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND last_error IS NOT NULL AND last_error <> $4`, tenant, process, id, erasedText); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE process_history SET note = CASE WHEN note = '' THEN '' ELSE $4 END, summary = summary - 'reason'
WHERE tenant_id = $1 AND process = $2 AND instance = $3 AND ((note <> '' AND note <> $4) OR summary ? 'reason')`, tenant, process, id, erasedText)
	return err
}

// backups is the receipt's line for the deployment's backups: those taken
// before the key was destroyed hold it (and what it sealed), and strata
// cannot reach them; they are beyond use (never restored to serve, docs/
// personal-data.md) until the retention ends them.
func (e *Eraser) backups(keyID string) Store {
	s := Store{Name: "backups", Mode: ModeBeyondUse, Count: -1}
	switch {
	case keyID == "":
		s.Count, s.Note = 0, "no key was destroyed"
	case e.cfg.BackupRetention <= 0:
		s.Note = "backups taken before now hold the key until the deployment's retention deletes them (STRATA_BACKUP_RETENTION dates it); a restore from one must run this erasure again"
	default:
		until := time.Now().UTC().Add(e.cfg.BackupRetention).Truncate(time.Second)
		s.Until = &until
		s.Note = "backups taken before now hold the key until they expire; a restore from one must run this erasure again"
	}
	return s
}
