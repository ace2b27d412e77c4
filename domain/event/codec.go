package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
)

// Payload is implemented by every event payload. EventType returns the
// stable wire name ("order.placed"), never derived from the Go type name:
// renaming a Go type must not change stored data.
type Payload interface {
	EventType() string
}

// Upcaster turns the JSON of schema version v into the JSON of version v+1.
type Upcaster func(data json.RawMessage) (json.RawMessage, error)

// Codec describes one event type.
type Codec struct {
	Type    string
	Version int // current schema version, >= 1
	// New returns a pointer to a zero payload of the current version.
	New func() Payload
	// Upcasters[v] upgrades version v to v+1, for every v < Version.
	Upcasters map[int]Upcaster
	// Personal declares the type's personal data, nil when it has none
	// (personal.go).
	Personal *Personal
	// Tags, optional, returns the tags of an event of this type (tags.go):
	// what an append condition may query it by. A tag is stored as
	// written, in plaintext: a personal value goes in through a digest
	// (TagDigest), never as is.
	Tags func(Payload) []string
}

// ErrUnknownType is returned when decoding a type no codec is registered for.
var ErrUnknownType = errors.New("unknown event type")

// Registry maps event type names to codecs.
type Registry struct {
	byType    map[string]Codec
	protector Protector // seals and opens personal fields; nil: none
}

// NewRegistry returns a registry holding codecs. It panics on a programming
// error (duplicate type, missing upcaster): registries are built at init.
func NewRegistry(codecs ...Codec) *Registry {
	r := &Registry{byType: map[string]Codec{}}
	for _, c := range codecs {
		r.mustRegister(c)
	}
	return r
}

func (r *Registry) mustRegister(c Codec) {
	if c.Type == "" || c.Version < 1 || c.New == nil {
		panic(fmt.Sprintf("event: invalid codec %q", c.Type))
	}
	if _, dup := r.byType[c.Type]; dup {
		panic(fmt.Sprintf("event: codec %q registered twice", c.Type))
	}
	for v := 1; v < c.Version; v++ {
		if c.Upcasters[v] == nil {
			panic(fmt.Sprintf("event: codec %q lacks an upcaster from v%d", c.Type, v))
		}
	}
	if err := c.validatePersonal(); err != nil {
		panic(err.Error())
	}
	sample := c.New()
	if sample.EventType() != c.Type {
		panic(fmt.Sprintf("event: codec %q builds payloads of type %q", c.Type, sample.EventType()))
	}
	r.byType[c.Type] = c
}

// Types lists the registered type names, sorted.
func (r *Registry) Types() []string {
	out := make([]string, 0, len(r.byType))
	for t := range r.byType {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Has reports whether typ has a codec.
func (r *Registry) Has(typ string) bool {
	_, ok := r.byType[typ]
	return ok
}

// Encode marshals p and returns its type name and current schema version.
func (r *Registry) Encode(p Payload) (typ string, version int, data []byte, err error) {
	if p == nil || reflect.ValueOf(p).Kind() == reflect.Pointer && reflect.ValueOf(p).IsNil() {
		return "", 0, nil, errors.New("encode: nil payload")
	}
	c, ok := r.byType[p.EventType()]
	if !ok {
		return "", 0, nil, fmt.Errorf("encode %s: %w", p.EventType(), ErrUnknownType)
	}
	if reflect.TypeOf(p).Kind() == reflect.Pointer {
		p = reflect.ValueOf(p).Elem().Interface().(Payload)
	}
	data, err = json.Marshal(p)
	if err != nil {
		return "", 0, nil, fmt.Errorf("encode %s: %w", c.Type, err)
	}
	return c.Type, c.Version, data, nil
}

// Tags returns the tags of payload p, as its codec declares them, in
// their stored form (NormalizeTags); nil for a type without tags.
func (r *Registry) Tags(p Payload) ([]string, error) {
	c, ok := r.byType[p.EventType()]
	if !ok {
		return nil, fmt.Errorf("tags of %s: %w", p.EventType(), ErrUnknownType)
	}
	if c.Tags == nil {
		return nil, nil
	}
	if reflect.TypeOf(p).Kind() == reflect.Pointer {
		p = reflect.ValueOf(p).Elem().Interface().(Payload)
	}
	tags, err := NormalizeTags(c.Tags(p))
	if err != nil {
		return nil, fmt.Errorf("tags of %s: %w", c.Type, err)
	}
	return tags, nil
}

// Decode returns the payload stored as typ at schema version, upcasting it to
// the current version first. The returned value is a non-pointer payload.
func (r *Registry) Decode(typ string, version int, data []byte) (Payload, error) {
	c, ok := r.byType[typ]
	if !ok {
		return nil, fmt.Errorf("decode %s: %w", typ, ErrUnknownType)
	}
	if version < 1 || version > c.Version {
		return nil, fmt.Errorf("decode %s: schema version %d not in 1..%d", typ, version, c.Version)
	}
	if Sealed(data) {
		return nil, fmt.Errorf("decode %s: %w (decode it as a record)", typ, ErrSealed)
	}
	raw := json.RawMessage(data)
	for v := version; v < c.Version; v++ {
		var err error
		if raw, err = c.Upcasters[v](raw); err != nil {
			return nil, fmt.Errorf("decode %s: upcast v%d: %w", typ, v, err)
		}
	}
	if string(raw) == "null" {
		return nil, fmt.Errorf("decode %s v%d: payload is null", typ, version)
	}
	p := c.New()
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("decode %s v%d: %w", typ, version, err)
	}
	return reflect.ValueOf(p).Elem().Interface().(Payload), nil
}

// DecodeRecord is Decode applied to a stored record, its sealed personal
// fields opened first (Open).
func (r *Registry) DecodeRecord(rec Record) (Payload, error) {
	data, err := r.Open(rec)
	if err != nil {
		return nil, err
	}
	return r.Decode(rec.Type, rec.SchemaVersion, data)
}
