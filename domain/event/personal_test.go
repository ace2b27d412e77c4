package event_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/strata-es/strata/domain/event"
)

type opened struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
	Note     string `json:"note,omitempty"`
}

func (opened) EventType() string { return "t.opened" }

type paid struct {
	ID  string `json:"id"`
	Ref string `json:"ref"`
}

func (paid) EventType() string { return "t.paid" }

// memProtector is a Protector for the registry's unit tests: it "seals"
// by reversing the bytes and checks the binding; the keyring's own test
// (package personal) is the real one, on PostgreSQL.
type memProtector struct {
	keys      map[string]string // subject -> key ID
	destroyed map[string]bool
}

func (m *memProtector) SubjectKey(_ context.Context, tenant, subject string) (string, error) {
	k := tenant + "/" + subject
	if id, ok := m.keys[k]; ok {
		return id, nil
	}
	id := strings.Repeat("0", 31) + string(rune('a'+len(m.keys)))
	m.keys[k] = id
	return id, nil
}

func bind(b event.Binding) string {
	return b.Tenant + "|" + b.Stream + "|" + b.Type + "|" + b.Field + "|"
}

func (m *memProtector) Seal(_ context.Context, keyID string, b event.Binding, v []byte) (event.Envelope, error) {
	box := []byte(bind(b) + string(v))
	for i, j := 0, len(box)-1; i < j; i, j = i+1, j-1 {
		box[i], box[j] = box[j], box[i]
	}
	return event.Envelope{KeyID: keyID, Box: box}, nil
}

func (m *memProtector) Open(_ context.Context, e event.Envelope, b event.Binding) ([]byte, error) {
	if m.destroyed[e.KeyID] {
		return nil, event.ErrShredded
	}
	box := append([]byte(nil), e.Box...)
	for i, j := 0, len(box)-1; i < j; i, j = i+1, j-1 {
		box[i], box[j] = box[j], box[i]
	}
	rest, ok := strings.CutPrefix(string(box), bind(b))
	if !ok {
		return nil, errors.New("bound elsewhere")
	}
	return []byte(rest), nil
}

func personalRegistry() *event.Registry {
	return event.NewRegistry(
		event.Codec{Type: "t.opened", Version: 1, New: func() event.Payload { return new(opened) },
			Personal: &event.Personal{Subject: "customer", Fields: []event.PersonalField{
				{Name: "customer", Tombstone: event.Pseudonym("erased-")}, {Name: "note", Tombstone: event.Erased("")}}}},
		event.Codec{Type: "t.paid", Version: 1, New: func() event.Payload { return new(paid) },
			Personal: &event.Personal{Fields: []event.PersonalField{{Name: "ref", Tombstone: event.Erased("erased")}}}},
	)
}

func TestSealOpenAndShred(t *testing.T) {
	p := &memProtector{keys: map[string]string{}, destroyed: map[string]bool{}}
	reg := personalRegistry().Protect(p)
	ctx := context.Background()
	seal := func(stream string, pl event.Payload, streamKey func() (string, error)) event.Record {
		t.Helper()
		typ, v, data, err := reg.Encode(pl)
		if err != nil {
			t.Fatal(err)
		}
		if data, err = reg.Seal(ctx, "t1", stream, typ, data, streamKey); err != nil {
			t.Fatal(err)
		}
		return event.Record{Tenant: "t1", Stream: stream, Type: typ, SchemaVersion: v, Data: data}
	}
	created := seal("s-1", opened{ID: "1", Customer: "alice", Note: "call after 6"}, nil)
	for _, plain := range []string{"alice", "call after 6"} {
		if strings.Contains(string(created.Data), plain) {
			t.Fatalf("sealed event holds %q: %s", plain, created.Data)
		}
	}
	if !strings.Contains(string(created.Data), `"id":"1"`) {
		t.Fatalf("a field that is not personal was sealed: %s", created.Data)
	}
	key := event.SealedKey(created.Data)
	if key == "" {
		t.Fatalf("no sealed key in %s", created.Data)
	}
	// The payment's subject is the stream's: the key that sealed the
	// stream's first personal event.
	payment := seal("s-1", paid{ID: "1", Ref: "ref-9"}, func() (string, error) { return key, nil })
	if event.SealedKey(payment.Data) != key {
		t.Fatalf("the payment was sealed with another key than its stream's subject's: %s", payment.Data)
	}
	if _, err := reg.Seal(ctx, "t1", "s-2", "t.paid", []byte(`{"id":"2","ref":"r"}`), func() (string, error) { return "", nil }); !errors.Is(err, event.ErrNoSubject) {
		t.Fatalf("a stream-subject event in a stream without a subject: %v, want ErrNoSubject", err)
	}

	got, err := reg.DecodeRecord(created)
	if err != nil || got != (opened{ID: "1", Customer: "alice", Note: "call after 6"}) {
		t.Fatalf("decode: %+v %v", got, err)
	}
	// Bound to its place: the same bytes in another stream do not open.
	moved := created
	moved.Stream = "s-9"
	if _, err := reg.DecodeRecord(moved); err == nil {
		t.Fatal("a sealed field opened in another stream")
	}
	// Without a protector, a sealed event is refused, never decoded to
	// zero values.
	if _, err := personalRegistry().DecodeRecord(created); !errors.Is(err, event.ErrSealed) {
		t.Fatalf("decode without a keyring: %v, want ErrSealed", err)
	}

	// Shredded: every field decodes to its tombstone, the same each time,
	// and the pseudonym names no one.
	p.destroyed[key] = true
	pseudo := event.PseudonymOf(key)
	for i := 0; i < 2; i++ {
		got, err = reg.DecodeRecord(created)
		if err != nil || got != (opened{ID: "1", Customer: "erased-" + pseudo, Note: ""}) {
			t.Fatalf("decode after shredding: %+v %v", got, err)
		}
	}
	if got, err := reg.DecodeRecord(payment); err != nil || got != (paid{ID: "1", Ref: "erased"}) {
		t.Fatalf("payment after shredding: %+v %v", got, err)
	}
	raw, err := reg.Open(payment)
	if err != nil || !json.Valid(raw) || strings.Contains(string(raw), event.SealedField) {
		t.Fatalf("open after shredding: %s %v", raw, err)
	}
}

// TestSealRefusesForgedSeals: a value shaped as a sealed field that no
// keyring wrote (a request body, an imported archive) is refused before
// the log, whatever the type: readers would fail on it forever.
func TestSealRefusesForgedSeals(t *testing.T) {
	reg := personalRegistry().Protect(&memProtector{keys: map[string]string{}})
	forged := `{"id":"1","customer":"bob","note":{"$sealed":"v1.` + strings.Repeat("0", 32) + `.AAAA"}}`
	if _, err := reg.Seal(context.Background(), "t1", "s-1", "t.opened", []byte(forged), nil); !errors.Is(err, event.ErrForgedSeal) {
		t.Fatalf("forged seal: %v, want ErrForgedSeal", err)
	}
	if _, err := reg.Seal(context.Background(), "t1", "s-1", "t.unknown", []byte(forged), nil); !errors.Is(err, event.ErrForgedSeal) {
		t.Fatalf("forged seal in a type without personal data: %v, want ErrForgedSeal", err)
	}
	// The string "$sealed" as a value is data, not a seal.
	if _, err := reg.Seal(context.Background(), "t1", "s-1", "t.opened", []byte(`{"id":"1","customer":"bob","note":"$sealed"}`), nil); err != nil {
		t.Fatalf("a note reading $sealed: %v", err)
	}
}

func TestPersonalDeclarationsAreChecked(t *testing.T) {
	for name, p := range map[string]*event.Personal{
		"no fields":    {Subject: "customer"},
		"no tombstone": {Fields: []event.PersonalField{{Name: "customer"}}},
		"twice":        {Fields: []event.PersonalField{{Name: "a", Tombstone: event.Erased("")}, {Name: "a", Tombstone: event.Erased("")}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: registered", name)
				}
			}()
			event.NewRegistry(event.Codec{Type: "t.opened", Version: 1, New: func() event.Payload { return new(opened) }, Personal: p})
		}()
	}
}

// TestRedact: the named top-level members become their tombstones, the
// rest of the bytes stay as they were, and what is not an object passes.
func TestRedact(t *testing.T) {
	fields := []event.PersonalField{{Name: "ref", Tombstone: event.Erased("erased")}, {Name: "who", Tombstone: event.Pseudonym("gone-")}}
	for _, c := range []struct {
		in, want string
		n        int
	}{
		{`{"ref":"psp-1","n":1, "who" : {"deep":"x"},"lines":[{"ref":"kept: not top-level"}]}`,
			`{"ref":"erased","n":1, "who" : "gone-p1","lines":[{"ref":"kept: not top-level"}]}`, 2},
		{`{"n":1}`, `{"n":1}`, 0},
		{`null`, `null`, 0},
		{`[{"ref":"x"}]`, `[{"ref":"x"}]`, 0},
		{``, ``, 0},
	} {
		got, n, err := event.Redact([]byte(c.in), fields, "p1")
		if err != nil || string(got) != c.want || n != c.n {
			t.Errorf("Redact(%s) = %s, %d, %v; want %s, %d", c.in, got, n, err, c.want, c.n)
		}
	}
	if _, _, err := event.Redact([]byte(`{"ref":`), fields, "p1"); err == nil {
		t.Error("Redact of broken JSON: no error")
	}
}

func TestUnsealed(t *testing.T) {
	decl := &event.Personal{Fields: []event.PersonalField{{Name: "ref", Tombstone: event.Erased("")}, {Name: "who", Tombstone: event.Erased("")}}}
	for in, want := range map[string]string{
		`{"ref":{"$sealed":"v1.00112233445566778899aabbccddeeff.AAAA"},"who":null,"n":1}`: "",
		`{"ref":"psp-1","who":{"$sealed":"v1.00112233445566778899aabbccddeeff.AAAA"}}`:    "ref",
		`{"ref":"psp-1","who":"alice"}`: "ref,who",
		`not json`:                      "",
	} {
		if got := strings.Join(event.Unsealed([]byte(in), decl), ","); got != want {
			t.Errorf("Unsealed(%s) = %q, want %q", in, got, want)
		}
	}
}
