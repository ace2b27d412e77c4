package event

import (
	"encoding/json"
	"reflect"
	"testing"
)

// plainMetadata decodes as encoding/json does.
func plainMetadata(b []byte) (Metadata, error) {
	var m Metadata
	err := json.Unmarshal(b, &m)
	return m, err
}

var metadataCases = []string{
	`{}`, ` { } `, `{"command_id":"c-1"}`,
	`{"actor": "load", "command_id": "6f1c1b3a-5d1e-4f5e-9a0b-2c7d8e9f0a1b", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`,
	`{"actor":"a","correlation_id":"x","causation_id":"y","tracestate":"k=v","unknown":"z"}`,
	"{\n\t\"actor\" :\r\n \"a\" }",
	`{"actor":"a","actor":"b"}`, `{"ACTOR":"upper"}`, `{"Actor":"mixed"}`, `{"actör":"x"}`,
	`{"actor":"esc\"aped"}`, `{"actor":"\u00e9"}`, `{"actor":"é"}`, `{"actor":null}`, `{"actor":1}`,
	`{"other":{"nested":true},"actor":"a"}`, `{"other":[1,2]}`, `{"actor":"a",}`, `{"actor":"a"`, `{"actor" "a"}`,
	`{"actor":"a"} x`, `[]`, `null`, `""`, ``, `{`, `{"actor":"` + "\x01" + `"}`, `{"actor":"` + "\xff" + `"}`,
}

// TestDecodeMetadata: DecodeMetadata gives what encoding/json gives, value
// and error alike, on every case.
func TestDecodeMetadata(t *testing.T) {
	for _, c := range metadataCases {
		got, gotErr := DecodeMetadata([]byte(c))
		want, wantErr := plainMetadata([]byte(c))
		if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) && wantErr == nil {
			t.Errorf("%q: got %+v, %v; encoding/json %+v, %v", c, got, gotErr, want, wantErr)
		}
	}
	if _, ok := parseFlatStrings([]byte(metadataCases[3])); !ok {
		t.Error("the common shape did not take the fast path")
	}
}

func FuzzDecodeMetadata(f *testing.F) {
	for _, c := range metadataCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotErr := DecodeMetadata(b)
		want, wantErr := plainMetadata(b)
		if (gotErr == nil) != (wantErr == nil) || wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: got %+v, %v; encoding/json %+v, %v", b, got, gotErr, want, wantErr)
		}
	})
}

func BenchmarkMetadataDecode(b *testing.B) {
	raw := []byte(metadataCases[3])
	b.Run("DecodeMetadata", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeMetadata(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := plainMetadata(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
