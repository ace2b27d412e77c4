package event_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/strata-es/strata/domain/event"
)

// Test payloads: thing.happened is at schema version 3, with upcasters
// renaming "n" (v1) to "count" (v2) and adding "unit" (v3).
type happened struct {
	Count int    `json:"count"`
	Unit  string `json:"unit"`
}

func (happened) EventType() string { return "thing.happened" }

type other struct{ Ch chan int }

func (other) EventType() string { return "thing.other" }

type wrongType struct{}

func (wrongType) EventType() string { return "thing.wrong" }

func happenedCodec() event.Codec {
	return event.Codec{
		Type:    "thing.happened",
		Version: 3,
		New:     func() event.Payload { return &happened{} },
		Upcasters: map[int]event.Upcaster{
			1: func(data json.RawMessage) (json.RawMessage, error) {
				var v1 struct {
					N *int `json:"n"`
				}
				if err := json.Unmarshal(data, &v1); err != nil {
					return nil, err
				}
				if v1.N == nil {
					return nil, errors.New("v1 without n")
				}
				return json.Marshal(map[string]int{"count": *v1.N})
			},
			2: func(data json.RawMessage) (json.RawMessage, error) {
				var v2 map[string]any
				if err := json.Unmarshal(data, &v2); err != nil {
					return nil, err
				}
				if v2 == nil {
					return json.RawMessage("null"), nil
				}
				v2["unit"] = "piece"
				return json.Marshal(v2)
			},
		},
	}
}

func otherCodec() event.Codec {
	return event.Codec{Type: "thing.other", Version: 1, New: func() event.Payload { return &other{} }}
}

func TestRegistryRoundTripAndUpcast(t *testing.T) {
	t.Parallel()
	r := event.NewRegistry(happenedCodec(), otherCodec())
	if got := r.Types(); !slices.Equal(got, []string{"thing.happened", "thing.other"}) {
		t.Errorf("Types = %v", got)
	}
	for _, p := range []event.Payload{happened{Count: 2, Unit: "kg"}, &happened{Count: 3, Unit: "g"}} {
		typ, v, data, err := r.Encode(p)
		if err != nil || typ != "thing.happened" || v != 3 {
			t.Fatalf("Encode(%#v) = %q v%d, %v", p, typ, v, err)
		}
		got, err := r.Decode(typ, v, data)
		if err != nil {
			t.Fatal(err)
		}
		want := p
		if ptr, ok := p.(*happened); ok {
			want = *ptr
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Decode = %#v, want %#v (a value, never a pointer)", got, want)
		}
	}
	got, err := r.DecodeRecord(event.Record{Type: "thing.happened", SchemaVersion: 1, Data: json.RawMessage(`{"n":7}`)})
	if err != nil || got != (happened{Count: 7, Unit: "piece"}) {
		t.Errorf("upcast from v1 = %#v, %v", got, err)
	}
	got, err = r.Decode("thing.happened", 2, []byte(`{"count":8}`))
	if err != nil || got != (happened{Count: 8, Unit: "piece"}) {
		t.Errorf("upcast from v2 = %#v, %v", got, err)
	}
}

func TestRegistryErrors(t *testing.T) {
	t.Parallel()
	r := event.NewRegistry(happenedCodec(), otherCodec())
	var nilPtr *happened
	for _, tc := range []struct {
		name    string
		p       event.Payload
		wantErr error  // errors.Is target, or nil
		want    string // fragment of the message
	}{
		{"nil", nil, nil, "nil payload"},
		{"typed nil pointer", nilPtr, nil, "nil payload"},
		{"unregistered type", wrongType{}, event.ErrUnknownType, "encode thing.wrong"},
		{"unmarshalable", other{Ch: make(chan int)}, nil, "encode thing.other"},
	} {
		_, _, _, err := r.Encode(tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
			t.Errorf("Encode %s: %v, want %q", tc.name, err, tc.want)
		}
	}

	for _, tc := range []struct {
		name    string
		typ     string
		version int
		data    string
		wantErr error
		want    string
	}{
		{"unknown type", "thing.nope", 1, `{}`, event.ErrUnknownType, "decode thing.nope"},
		{"version 0", "thing.happened", 0, `{}`, nil, "schema version 0 not in 1..3"},
		{"version from the future", "thing.happened", 4, `{}`, nil, "schema version 4 not in 1..3"},
		{"upcaster fails", "thing.happened", 1, `{}`, nil, "upcast v1: v1 without n"},
		{"upcaster gets bad JSON", "thing.happened", 1, `{`, nil, "upcast v1"},
		{"null payload", "thing.happened", 3, `null`, nil, "payload is null"},
		{"null after upcasting", "thing.happened", 2, `null`, nil, "payload is null"},
		{"bad JSON", "thing.happened", 3, `{"count":"x"}`, nil, "decode thing.happened v3"},
		{"not JSON", "thing.happened", 3, `nope`, nil, "decode thing.happened v3"},
	} {
		p, err := r.Decode(tc.typ, tc.version, []byte(tc.data))
		if err == nil || p != nil || !strings.Contains(err.Error(), tc.want) || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
			t.Errorf("Decode %s = %#v, %v; want an error containing %q", tc.name, p, err, tc.want)
		}
	}
}

func TestNewRegistryPanicsOnProgrammingErrors(t *testing.T) {
	t.Parallel()
	noUpcaster := happenedCodec()
	delete(noUpcaster.Upcasters, 2)
	for _, tc := range []struct {
		name   string
		codecs []event.Codec
		want   string
	}{
		{"no type", []event.Codec{{Version: 1, New: func() event.Payload { return &happened{} }}}, "invalid codec"},
		{"version 0", []event.Codec{{Type: "thing.happened", New: func() event.Payload { return &happened{} }}}, "invalid codec"},
		{"no constructor", []event.Codec{{Type: "thing.happened", Version: 1}}, "invalid codec"},
		{"registered twice", []event.Codec{otherCodec(), otherCodec()}, "registered twice"},
		{"missing upcaster", []event.Codec{noUpcaster}, "lacks an upcaster from v2"},
		{"constructor of another type", []event.Codec{{Type: "thing.x", Version: 1, New: func() event.Payload { return &wrongType{} }}}, `builds payloads of type "thing.wrong"`},
	} {
		func() {
			defer func() {
				v := recover()
				if msg, _ := v.(string); !strings.Contains(msg, tc.want) {
					t.Errorf("%s: panic %v, want one containing %q", tc.name, v, tc.want)
				}
			}()
			event.NewRegistry(tc.codecs...)
		}()
	}
}
