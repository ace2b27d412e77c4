package event

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
)

// b64 encodes envelopes' ciphertexts.
var b64 = base64.RawStdEncoding

// Personal declares the personal data of one event type (ARCHITECTURE
// decision 16): which top-level fields of its JSON are personal, and whose
// they are. A registry with a Protector seals those fields before the log,
// each with the key of its data subject, and opens them on every read;
// once a subject's key is destroyed, every path decodes its fields to the
// declared tombstones, the same on every read, so a rebuild after the
// erasure still equals the live read model.
type Personal struct {
	// Subject names the field holding the data subject's ID (a customer's,
	// say), itself usually personal too. Empty: the subject is the
	// stream's, the one an earlier event of the same stream named (an
	// order's payment belongs to the order's customer).
	Subject string
	// Fields are the personal fields, by JSON name.
	Fields []PersonalField
}

// PersonalField is one personal field of an event and what it decodes to
// once its subject is forgotten.
type PersonalField struct {
	Name string
	// Tombstone gives the value the field decodes to after the erasure.
	// It must be a valid value of the field for the module (its events'
	// Validate and its aggregates see it): Erased for a constant,
	// Pseudonym for a value that differs between forgotten subjects and
	// names none of them.
	Tombstone Tombstone
}

// Tombstone returns the value of an erased field, from the forgotten
// subject's pseudonym: a string derived from the destroyed key's ID alone,
// the same for every field and event of that subject and nothing a reader
// can trace back to the person. It must be a pure function: every rebuild
// depends on it answering the same.
type Tombstone func(pseudonym string) any

// Erased is the tombstone that is always v.
func Erased(v any) Tombstone { return func(string) any { return v } }

// Pseudonym is the tombstone prefix followed by the subject's pseudonym:
// erased subjects stay apart (a read model keyed by customer keeps one row
// per forgotten customer) without naming any of them.
func Pseudonym(prefix string) Tombstone { return func(p string) any { return prefix + p } }

// SealedField is the only key of the JSON object that stands for a sealed
// field in a stored event: {"$sealed": "v1.<key ID>.<base64 ciphertext>"}.
// An object with that one key is never a module's own value, so every
// reader can tell a sealed field from data.
const SealedField = "$sealed"

// sealedMarker finds an event's sealed fields cheaply before any parsing.
var sealedMarker = []byte(`"` + SealedField + `"`)

// Errors of personal data.
var (
	// ErrShredded: the key of a sealed field's subject was destroyed (the
	// subject was erased). A Protector's Open returns it; the registry
	// decodes the field to its tombstone.
	ErrShredded = errors.New("the data subject's key was destroyed")
	// ErrSealed: an event holds sealed personal data and the registry has
	// no Protector to open it (a tool run without the keyring).
	ErrSealed = errors.New("the event holds sealed personal data and this registry has no keyring")
	// ErrNoSubject: an event whose personal data belongs to its stream's
	// subject, in a stream where no earlier event named one.
	ErrNoSubject = errors.New("personal data without a data subject")
	// ErrForgedSeal: an event to be written holds an object shaped as a
	// sealed field ({"$sealed": ...}) that no Protector made.
	ErrForgedSeal = errors.New(`the event holds a value shaped as a sealed field ({"` + SealedField + `": ...}), which only strata's keyring writes`)
)

// Binding is what a sealed value is bound to (the AEAD's associated
// data): the tenant, the stream, the event type and the field. A sealed
// value copied anywhere else does not open.
type Binding struct {
	Tenant, Stream, Type, Field string
}

// Protector seals personal fields with their subjects' keys and opens
// them. strata's keyring (package personal) is one; the key never leaves
// it.
type Protector interface {
	// SubjectKey returns the ID of the key of tenant's data subject,
	// creating the key on first use.
	SubjectKey(ctx context.Context, tenant, subject string) (string, error)
	// Seal encrypts value (one field's JSON) with key keyID, bound to b,
	// and returns the envelope.
	Seal(ctx context.Context, keyID string, b Binding, value []byte) (Envelope, error)
	// Open returns the JSON sealed in e; ErrShredded when e's key was
	// destroyed.
	Open(ctx context.Context, e Envelope, b Binding) ([]byte, error)
}

// Envelope is one sealed field: the ID of the key that sealed it and the
// ciphertext (nonce included).
type Envelope struct {
	KeyID string
	Box   []byte
}

const envelopeVersion = "v1"

// String is the envelope's stored form.
func (e Envelope) String() string {
	return envelopeVersion + "." + e.KeyID + "." + b64.EncodeToString(e.Box)
}

// ParseEnvelope is the inverse of String.
func ParseEnvelope(s string) (Envelope, error) {
	v, rest, ok := strings.Cut(s, ".")
	if !ok || v != envelopeVersion {
		return Envelope{}, fmt.Errorf("sealed field: unknown envelope version %q", v)
	}
	id, box, ok := strings.Cut(rest, ".")
	if !ok || id == "" {
		return Envelope{}, errors.New("sealed field: malformed envelope")
	}
	raw, err := b64.DecodeString(box)
	if err != nil {
		return Envelope{}, fmt.Errorf("sealed field: %w", err)
	}
	return Envelope{KeyID: id, Box: raw}, nil
}

// PseudonymOf is the pseudonym of the subject whose key is keyID.
func PseudonymOf(keyID string) string {
	sum := sha256.Sum256([]byte("strata-pseudonym/v1\x00" + keyID))
	return hex.EncodeToString(sum[:8])
}

// Protect returns a registry with r's codecs whose encodings for a
// tenant's stream seal personal fields with p and whose decodings open
// them (ErrSealed without one).
func (r *Registry) Protect(p Protector) *Registry {
	return &Registry{byType: r.byType, protector: p}
}

// Protector returns the registry's protector, nil when it has none.
func (r *Registry) Protector() Protector { return r.protector }

// Personal returns the personal-data declaration of typ, nil when it has
// none.
func (r *Registry) Personal(typ string) *Personal {
	return r.byType[typ].Personal
}

// HasPersonal reports whether any registered type declares personal data.
func (r *Registry) HasPersonal() bool {
	for _, c := range r.byType {
		if c.Personal != nil {
			return true
		}
	}
	return false
}

// Sealed reports whether data (an event's stored JSON) holds a sealed
// field.
func Sealed(data []byte) bool {
	_, sealed := sealedFields(data)
	return sealed != nil
}

// SealedKey returns the key ID of the first sealed field of data, "" when
// it has none: a stream's subject is the one whose key sealed its first
// personal event (every sealed field of an event has its subject's key).
func SealedKey(data []byte) string {
	_, sealed := sealedFields(data)
	for _, s := range sealed {
		if s == "" {
			continue
		}
		if e, err := ParseEnvelope(s); err == nil {
			return e.KeyID
		}
	}
	return ""
}

// StreamKey returns the key of a stream's data subject, from its events
// in order (type and stored JSON): the key that sealed its first sealed
// event; or, for history written before its module declared personal
// data, the key of the subject that the first event of a type naming its
// subject (Personal.Subject) names in plaintext. "" when neither is found.
func (r *Registry) StreamKey(ctx context.Context, tenant string, history iter.Seq2[string, []byte]) (string, error) {
	for typ, data := range history {
		if id := SealedKey(data); id != "" {
			return id, nil
		}
		p := r.byType[typ].Personal
		if p == nil || p.Subject == "" || r.protector == nil {
			continue
		}
		members, ok := topMembers(data)
		if !ok {
			continue
		}
		if subject, ok := stringMember(data, members, p.Subject); ok && subject != "" {
			return r.protector.SubjectKey(ctx, tenant, subject)
		}
	}
	return "", nil
}

// Seal seals the personal fields of data, the JSON of an event of type typ
// for tenant's stream, with the key of the event's subject; streamKey
// finds the stream's subject key (SealedKey of its earlier events) for a
// type whose subject is the stream's, and is only called then. Data of a
// type without personal fields, or of a registry without a protector,
// comes back as it is.
func (r *Registry) Seal(ctx context.Context, tenant, stream, typ string, data []byte, streamKey func() (string, error)) ([]byte, error) {
	if _, forged := sealedFields(data); forged != nil {
		// Only a Protector seals: a sealed-looking value that comes in
		// (a request body, an imported archive) would not open, and every
		// reader of the event would fail on it.
		return nil, fmt.Errorf("seal %s: %w", typ, ErrForgedSeal)
	}
	c, ok := r.byType[typ]
	if !ok || c.Personal == nil || r.protector == nil {
		return data, nil
	}
	members, ok := topMembers(data)
	if !ok {
		return nil, fmt.Errorf("seal %s: not a JSON object", typ)
	}
	keyID, err := r.subjectKey(ctx, tenant, stream, typ, c.Personal, data, members, streamKey)
	if err != nil {
		return nil, err
	}
	values := make([][]byte, len(members))
	for k, m := range members {
		if !c.Personal.declares(m.name) {
			continue
		}
		v := data[m.start:m.end]
		if string(v) == "null" {
			continue
		}
		e, err := r.protector.Seal(ctx, keyID, Binding{Tenant: tenant, Stream: stream, Type: typ, Field: m.name}, v)
		if err != nil {
			return nil, fmt.Errorf("seal %s.%s: %w", typ, m.name, err)
		}
		values[k] = e.object()
	}
	return splice(data, members, values), nil
}

// declares reports whether field is one of p's personal fields.
func (p *Personal) declares(field string) bool {
	for _, f := range p.Fields {
		if f.Name == field {
			return true
		}
	}
	return false
}

// object is the JSON of a sealed field: {"$sealed": "<envelope>"} (the
// envelope's characters need no escaping).
func (e Envelope) object() []byte {
	s := e.String()
	b := make([]byte, 0, len(s)+len(SealedField)+8)
	b = append(b, `{"`+SealedField+`":"`...)
	b = append(b, s...)
	return append(b, `"}`...)
}

// stringMember decodes the string value of the member named name.
func stringMember(data []byte, members []member, name string) (string, bool) {
	for _, m := range members {
		if m.name == name {
			var s string
			if json.Unmarshal(data[m.start:m.end], &s) != nil {
				return "", false
			}
			return s, true
		}
	}
	return "", false
}

func (r *Registry) subjectKey(ctx context.Context, tenant, stream, typ string, p *Personal, data []byte, members []member, streamKey func() (string, error)) (string, error) {
	if p.Subject == "" {
		if streamKey == nil {
			return "", fmt.Errorf("seal %s in %s: %w (its subject is the stream's, and no earlier event is known)", typ, stream, ErrNoSubject)
		}
		id, err := streamKey()
		if err != nil {
			return "", fmt.Errorf("seal %s: %w", typ, err)
		}
		if id == "" {
			return "", fmt.Errorf("seal %s in %s: %w (its subject is the stream's, and no earlier event of the stream named one)", typ, stream, ErrNoSubject)
		}
		return id, nil
	}
	subject, ok := stringMember(data, members, p.Subject)
	if !ok || subject == "" {
		return "", fmt.Errorf("seal %s: %w: field %q holds no subject ID", typ, ErrNoSubject, p.Subject)
	}
	id, err := r.protector.SubjectKey(ctx, tenant, subject)
	if err != nil {
		return "", fmt.Errorf("seal %s: the subject's key: %w", typ, err)
	}
	return id, nil
}

// Open returns rec's JSON with every sealed field opened: its plaintext,
// or its declared tombstone when the subject's key was destroyed (null
// for a field its type no longer declares). Without sealed fields the
// stored JSON comes back as it is.
func (r *Registry) Open(rec Record) (json.RawMessage, error) {
	members, sealed := sealedFields(rec.Data)
	if sealed == nil {
		return rec.Data, nil
	}
	if r.protector == nil {
		return nil, fmt.Errorf("decode %s: %w", rec.Type, ErrSealed)
	}
	decl := r.byType[rec.Type].Personal
	ctx := context.Background()
	values := make([][]byte, len(members))
	for k, s := range sealed {
		if s == "" {
			continue
		}
		name := members[k].name
		e, err := ParseEnvelope(s)
		if err != nil {
			return nil, fmt.Errorf("decode %s.%s: %w", rec.Type, name, err)
		}
		plain, err := r.protector.Open(ctx, e, Binding{Tenant: rec.Tenant, Stream: rec.Stream, Type: rec.Type, Field: name})
		switch {
		case errors.Is(err, ErrShredded):
			if plain, err = json.Marshal(tombstoneOf(decl, name, PseudonymOf(e.KeyID))); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, fmt.Errorf("decode %s.%s: %w", rec.Type, name, err)
		}
		values[k] = plain
	}
	return splice(rec.Data, members, values), nil
}

// sealedFields returns data's top-level members and, at the index of each
// sealed one, its envelope ("" for the others); sealed is nil when data
// holds no sealed field.
func sealedFields(data []byte) (members []member, sealed []string) {
	if !bytes.Contains(data, sealedMarker) {
		return nil, nil
	}
	members, ok := topMembers(data)
	if !ok {
		return nil, nil
	}
	for k, m := range members {
		if s, ok := sealedValue(data[m.start:m.end]); ok {
			if sealed == nil {
				sealed = make([]string, len(members))
			}
			sealed[k] = s
		}
	}
	return members, sealed
}

func tombstoneOf(decl *Personal, field, pseudonym string) any {
	if decl == nil {
		return nil
	}
	for _, f := range decl.Fields {
		if f.Name == field && f.Tombstone != nil {
			return f.Tombstone(pseudonym)
		}
	}
	return nil
}

// sealedValue returns the envelope of a field's JSON value when it is a
// sealed field.
func sealedValue(v json.RawMessage) (string, bool) {
	t := bytes.TrimSpace(v)
	if len(t) == 0 || t[0] != '{' || !bytes.Contains(t, sealedMarker) {
		return "", false
	}
	if s, ok := sealedFast(t); ok {
		return s, true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(t, &obj) != nil || len(obj) != 1 {
		return "", false
	}
	var s string
	if json.Unmarshal(obj[SealedField], &s) != nil || s == "" {
		return "", false
	}
	return s, true
}

// sealedFast reads a sealed field as Seal writes it and jsonb gives it
// back ({"$sealed": "<envelope>"}, spaces optional), without a decode: an
// envelope has no character JSON escapes. Anything else is left to the
// full decode.
func sealedFast(t []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(t, []byte(`{`))
	if !ok {
		return "", false
	}
	if rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " "), sealedMarker); !ok {
		return "", false
	}
	if rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " "), []byte(`:`)); !ok {
		return "", false
	}
	if rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " "), []byte(`"`)); !ok {
		return "", false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || string(bytes.TrimLeft(rest[end+1:], " ")) != "}" {
		return "", false
	}
	for _, c := range rest[:end] {
		if !envelopeChar(c) {
			return "", false
		}
	}
	return string(rest[:end]), true
}

// envelopeChar reports whether c may be in an envelope: the version and
// the key ID's characters, the dots, and base64's alphabet.
func envelopeChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '+' || c == '/' || c == '=' || c == '-' || c == '_'
}

func (c Codec) validatePersonal() error {
	p := c.Personal
	if p == nil {
		return nil
	}
	if len(p.Fields) == 0 {
		return fmt.Errorf("event: codec %q declares personal data without fields", c.Type)
	}
	seen := map[string]bool{}
	for _, f := range p.Fields {
		if f.Name == "" || f.Tombstone == nil {
			return fmt.Errorf("event: codec %q: a personal field needs a name and a tombstone", c.Type)
		}
		if seen[f.Name] {
			return fmt.Errorf("event: codec %q declares personal field %q twice", c.Type, f.Name)
		}
		seen[f.Name] = true
	}
	return nil
}

// ErasedText replaces free text stored beside a subject's data (a process
// manager's notes and reasons, an error quoting a field) once the subject
// is erased: nothing can tell whether such text quotes a personal field.
const ErasedText = "(erased with a data subject)"

// Redact returns the JSON object data with the top-level members named by
// fields replaced by their tombstones for pseudonym, and how many it
// replaced: what an erasure does to personal data stored outside the log
// in plaintext (a process manager's state and step payloads), where there
// is nothing sealed to shred. Data that is not a JSON object (null, an
// array) holds no such members and comes back as it is.
func Redact(data []byte, fields []PersonalField, pseudonym string) ([]byte, int, error) {
	if len(fields) == 0 || len(bytes.TrimSpace(data)) == 0 {
		return data, 0, nil
	}
	members, ok := topMembers(data)
	if !ok {
		if json.Valid(data) {
			return data, 0, nil
		}
		return nil, 0, errors.New("redact: the data is not JSON")
	}
	decl := &Personal{Fields: fields}
	values := make([][]byte, len(members))
	n := 0
	for k, m := range members {
		if !slices.ContainsFunc(fields, func(f PersonalField) bool { return f.Name == m.name }) {
			continue
		}
		v, err := json.Marshal(tombstoneOf(decl, m.name, pseudonym))
		if err != nil {
			return nil, 0, fmt.Errorf("redact %s: %w", m.name, err)
		}
		values[k], n = v, n+1
	}
	if n == 0 {
		return data, 0, nil
	}
	return splice(data, members, values), n, nil
}

// Unsealed returns the names of decl's fields that data (an event's stored
// JSON) holds in plaintext: present, not null, not sealed. The log of a
// forgotten subject's streams holds none, unless it was written before the
// module declared the fields.
func Unsealed(data []byte, decl *Personal) []string {
	if decl == nil {
		return nil
	}
	members, ok := topMembers(data)
	if !ok {
		return nil
	}
	var out []string
	for _, m := range members {
		if !slices.ContainsFunc(decl.Fields, func(f PersonalField) bool { return f.Name == m.name }) {
			continue
		}
		v := data[m.start:m.end]
		if _, sealed := sealedValue(v); sealed || string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		out = append(out, m.name)
	}
	return out
}
