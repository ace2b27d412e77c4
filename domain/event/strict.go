package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// Validator is implemented by a payload whose module has rules for it
// beyond its JSON shape: IDs of the module's own syntax, amounts in range,
// a time, and the stream it belongs in (an order event of order "a" is in
// stream "order-a", which is how process managers correlate it). A module's
// decisions only ever produce payloads that pass; Validate is for payloads
// that come from outside the module's decisions, an imported archive
// above all (ARCHITECTURE decision 18): such a payload reaches the read
// models, the process managers and the relay as it is, so a rule the
// module cannot check there (an ID with markup, a string where an amount
// belongs) must be checked before it is written. The error says which
// rule, naming values with %q.
type Validator interface {
	Validate(stream string) error
}

// ErrStrict: the JSON has a field the payload does not have, or more than
// one value.
var ErrStrict = errors.New("unexpected JSON")

// DecodeStrict is Decode for JSON that does not come from this module's
// own writes: after upcasting, the JSON must be one object holding only
// fields of the payload's current version (json.Decoder's
// DisallowUnknownFields) with nothing after it. Decode stays lenient on
// purpose: the log's own history is read as it was written.
func (r *Registry) DecodeStrict(typ string, version int, data []byte) (Payload, error) {
	c, ok := r.byType[typ]
	if !ok {
		return nil, fmt.Errorf("decode %q: %w", typ, ErrUnknownType)
	}
	if version < 1 || version > c.Version {
		return nil, fmt.Errorf("decode %s: schema version %d not in 1..%d", typ, version, c.Version)
	}
	raw := json.RawMessage(data)
	for v := version; v < c.Version; v++ {
		var err error
		if raw, err = c.Upcasters[v](raw); err != nil {
			return nil, fmt.Errorf("decode %s: upcast v%d: %w", typ, v, err)
		}
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("decode %s v%d: %w: not a JSON object", typ, version, ErrStrict)
	}
	p := c.New()
	if err := StrictUnmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("decode %s v%d: %w", typ, version, err)
	}
	return reflect.ValueOf(p).Elem().Interface().(Payload), nil
}

// StrictUnmarshal is json.Unmarshal refusing unknown fields and anything
// after the first value (both wrap ErrStrict).
func StrictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if isUnknownField(err) {
			return fmt.Errorf("%w: %v", ErrStrict, err)
		}
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the JSON value", ErrStrict)
	}
	return nil
}

// isUnknownField recognises DisallowUnknownFields' error, which has no
// type of its own.
func isUnknownField(err error) bool {
	return err != nil && bytes.HasPrefix([]byte(err.Error()), []byte("json: unknown field "))
}
