package event

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzTopMembers: for every well-formed JSON object, the members found
// without decoding are the object's members, and their values decode to
// what a full decode gives.
func FuzzTopMembers(f *testing.F) {
	for _, s := range []string{`{}`, ` { "a" : 1 , "b":[1,{"c":"}"}], "d\"e":"x\\"}`, `{"a":{"$sealed":"v1.x.y"},"b":null,"c":true,"d":-1.5e3}`,
		`{"k":"\u00e9\n","n":{"m":[[],{}]}}`, `[1]`, `{"a":1,}`, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		members, ok := topMembers(data)
		var want map[string]json.RawMessage
		isObject := json.Unmarshal(data, &want) == nil && want != nil
		if ok != isObject {
			t.Fatalf("%q: topMembers ok=%v, a JSON object: %v", data, ok, isObject)
		}
		if !ok {
			return
		}
		got := map[string]any{}
		for _, m := range members {
			var v any
			if err := json.Unmarshal(data[m.start:m.end], &v); err != nil {
				t.Fatalf("%q: member %q value %q: %v", data, m.name, data[m.start:m.end], err)
			}
			got[m.name] = v // the last of duplicate names wins, as in a decode
		}
		var whole map[string]any
		if err := json.Unmarshal(data, &whole); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("%q: members %v, decoded %v", data, got, whole)
		}
	})
}

// FuzzSealedValue: the fast read of a sealed field agrees with the full
// decode on everything.
func FuzzSealedValue(f *testing.F) {
	for _, s := range []string{`{"$sealed":"v1.ab.Zm9v"}`, `{"$sealed": "v1.ab.Zm9v"}`, `{ "$sealed" : "v1.x" }`, `{"$sealed":"a\"b"}`,
		`{"$sealed":"x","y":1}`, `{"$sealed":""}`, `{"$sealed":"x"} `, `{"$sealed":1}`, `{"$sealed":"x"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := sealedFast(data)
		if !ok {
			return
		}
		var obj map[string]json.RawMessage
		var want string
		if json.Unmarshal(data, &obj) != nil || len(obj) != 1 || json.Unmarshal(obj[SealedField], &want) != nil || want != got {
			t.Fatalf("%q: fast %q, full decode %q (%v)", data, got, want, obj)
		}
	})
}
