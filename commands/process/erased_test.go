package process

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// TestErasedInstanceStaysRedacted: a subject's erasure marks the instances
// on its streams (erased_as) while their steps are in flight; what the
// runtime writes of them afterwards (the steps' results and errors, the
// decisions' state and new step payloads, history notes and reasons)
// holds the declared fields' tombstones and no free text. An instance of
// nobody erased keeps its text.
func TestErasedInstanceStaysRedacted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	def := ticketDefinition
	def.Personal = []event.PersonalField{{Name: "ticket", Tombstone: event.Pseudonym("gone-")}, {Name: "ref", Tombstone: event.Pseudonym("gone-")}}
	m, err := New(def)
	if err != nil {
		t.Fatal(err)
	}
	b.spec.Manager = m
	held := make(chan struct{})
	assignFn := b.spec.Commands["test.assign"]
	b.spec.Commands["test.assign"] = func(ctx context.Context, tenant domain.TenantID, payload json.RawMessage, key string) (json.RawMessage, error) {
		select {
		case <-held:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return assignFn(ctx, tenant, payload, key)
	}
	b.start(b.runner(RunnerConfig{}))
	b.append("t-a", ticketOpened{ID: "k1"})
	b.append("t-a", ticketOpened{ID: "k2", Reject: true})
	b.append("t-a", ticketOpened{ID: "k3", Reject: true})
	for _, id := range []string{"k1", "k2", "k3"} {
		b.statusIs("t-a", id, "assigning")
	}
	// The erasure's mark, with the assign commands in flight (the state
	// is left as it was, so that the runtime's own redaction shows).
	b.admin(func(conn *pgx.Conn) {
		if _, err := conn.Exec(b.ctx, `UPDATE process_instances SET erased_as = 'ps1' WHERE instance IN ('k1', 'k2')`); err != nil {
			t.Fatal(err)
		}
	})
	close(held)

	// k1: the command's outcome decides a notify intent from the state.
	d := b.statusIs("t-a", "k1", "waiting")
	if member(t, d.State, "ticket") != "gone-ps1" {
		t.Errorf("k1 state after the erasure = %s, want its ticket tombstoned", d.State)
	}
	notified := false
	for _, st := range d.Steps {
		if st.Step == "notify" {
			notified = true
			if member(t, st.Payload, "ticket") != "gone-ps1" || member(t, st.Result, "ref") != "gone-ps1" {
				t.Errorf("k1 notify step payload %s result %s, want tombstones", st.Payload, st.Result)
			}
		}
	}
	if !notified {
		t.Errorf("k1 steps %+v: no notify step", d.Steps)
	}
	// k2: refused; the refusal's text is free text beside its data.
	d = b.statusIs("t-a", "k2", "unassigned")
	last := d.History[len(d.History)-1]
	if last.Note != event.ErasedText || strings.Contains(string(last.Summary), "reason") {
		t.Errorf("k2 outcome history: note %q summary %s, want the note erased and no reason", last.Note, last.Summary)
	}
	for _, st := range d.Steps {
		if st.Step == "assign" && (st.LastError != event.ErasedText || strings.Contains(string(st.Result), "nobody")) {
			t.Errorf("k2 assign step: last error %q result %s, want them erased", st.LastError, st.Result)
		}
	}
	// k3: nobody erased; the refusal is kept as it was.
	d = b.statusIs("t-a", "k3", "unassigned")
	if last := d.History[len(d.History)-1]; !strings.Contains(last.Note, "nobody takes this ticket") {
		t.Errorf("k3 outcome note %q: an instance of nobody erased lost its text", last.Note)
	}
}

// member returns the top-level string member name of the JSON object doc.
func member(t *testing.T, doc json.RawMessage, name string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	s, _ := m[name].(string)
	return s
}
