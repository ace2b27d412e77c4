package event_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/strata-es/strata/domain/event"
)

type sample struct {
	Name string `json:"name"`
	N    int    `json:"n"`
}

func (sample) EventType() string { return "test.sample" }

func sampleRegistry() *event.Registry {
	return event.NewRegistry(event.Codec{Type: "test.sample", Version: 2, New: func() event.Payload { return new(sample) },
		Upcasters: map[int]event.Upcaster{1: func(d json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(strings.Replace(string(d), `"title"`, `"name"`, 1)), nil
		}}})
}

// TestDecodeStrict: the payload's exact JSON after upcasting, nothing
// more; Decode stays lenient for the log's own history.
func TestDecodeStrict(t *testing.T) {
	r := sampleRegistry()
	if p, err := r.DecodeStrict("test.sample", 1, []byte(`{"title":"a","n":1}`)); err != nil || p != (sample{Name: "a", N: 1}) {
		t.Fatalf("v1 upcast: %v %v", p, err)
	}
	for _, tc := range []struct {
		data, want string
		is         error
	}{
		{`{"name":"a","extra":1}`, `unknown field "extra"`, event.ErrStrict},
		{`{"name":"a"} {"name":"b"}`, "data after the JSON value", event.ErrStrict},
		{`{"name":"a"}x`, "data after the JSON value", event.ErrStrict},
		{`null`, "not a JSON object", event.ErrStrict},
		{`[1]`, "not a JSON object", event.ErrStrict},
		{`{"n":"1"}`, "cannot unmarshal string", nil},
	} {
		_, err := r.DecodeStrict("test.sample", 2, []byte(tc.data))
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: %v, want %q", tc.data, err, tc.want)
		}
		if tc.is != nil && strings.Contains(tc.want, "unknown") {
			if _, err := r.Decode("test.sample", 2, []byte(tc.data)); err != nil {
				t.Errorf("Decode (lenient) of %s: %v", tc.data, err)
			}
		}
	}
	if _, err := r.DecodeStrict("nope", 1, []byte(`{}`)); !errors.Is(err, event.ErrUnknownType) {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := r.DecodeStrict("test.sample", 3, []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "schema version 3") {
		t.Errorf("future version: %v", err)
	}
}
