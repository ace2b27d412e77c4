package decodetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/strata-es/strata/httpapi"
)

// Budget is the most CPU time one decode may take, on any input. Under the
// race detector, which makes decoding ten to twenty times slower, the
// checks allow ten times as much.
const Budget = 100 * time.Millisecond

func budget() time.Duration {
	if raceEnabled {
		return 10 * Budget
	}
	return Budget
}

// maxMessage bounds an error message: hostile input (a megabyte-long key)
// must not be reflected back whole.
const maxMessage = 512

// Nest returns open, n times, then close, n times: deep nesting.
func Nest(open, close string, n int) []byte {
	return []byte(strings.Repeat(open, n) + strings.Repeat(close, n))
}

// Seeds returns hostile inputs built around the JSON field names of a
// request type: valid bodies, and each of them broken the ways
// encoding/json and its callers are known to get wrong (duplicate keys,
// case-variant keys, unknown fields, trailing data, deep nesting, huge
// numbers, invalid UTF-8, NUL bytes, empty body, null, arrays).
func Seeds(fields ...string) [][]byte {
	s := [][]byte{
		nil, []byte(""), []byte(" \n\t"), []byte("null"), []byte("[]"), []byte("[{}]"), []byte(`""`),
		[]byte("0"), []byte("true"), []byte("{}"), []byte("{} "), []byte("{}{}"), []byte("{}x"), []byte("{}\x00"),
		[]byte("{"), []byte("}"), []byte(`{"`), []byte(`{"a"}`), []byte(`{"a":}`), []byte(`{,}`), []byte(`{"a":1,}`),
		[]byte("\xef\xbb\xbf{}"),                         // BOM
		[]byte("\xff\xfe{\x00}\x00"),                     // UTF-16
		[]byte(`{"tenant_id":"b"}`),                      // smuggling an unknown field
		[]byte(`{"` + strings.Repeat("k", 300) + `":1}`), // a long unknown key, cut in the message
		Nest("[", "]", 10_000),
		Nest(`{"a":`, "}", 10_000),
		append(append([]byte(`{"a":`), Nest("[", "]", 10_000)...), '}'),
		[]byte(`{"a":1e400}`), []byte(`{"a":9223372036854775808}`), []byte(`{"a":-9223372036854775809}`),
		[]byte(`{"a":"\ud800"}`), // lone surrogate escape
		[]byte("{\"a\":\"\xff\"}"),
		[]byte("{\"a\":\"\x00\"}"),
		[]byte(`{"a":"\u0000"}`),
	}
	for i, f := range fields {
		q := func(k string) string { b, _ := json.Marshal(k); return string(b) }
		if i == 0 {
			// Large inputs slow the fuzzer down (minimizing one costs
			// seconds): only one field gets them, and megabyte bodies are
			// left to the table tests.
			s = append(s,
				[]byte(`{`+q(f)+`:`+string(Nest("[", "]", 10_000))+`}`),
				[]byte(`{`+q(f)+`:`+string(Nest(`{"amount":`, "}", 100))+`}`),
				[]byte(`{`+q(f)+`:"`+strings.Repeat("x", 1000)+`"}`),
			)
		}
		val := `"x"`
		one := `{` + q(f) + `:` + val + `}`
		s = append(s,
			[]byte(one),
			[]byte(`{`+q(f)+`:null}`),
			[]byte(`{`+q(f)+`:"x",`+q(f)+`:"y"}`),                   // duplicate
			[]byte(`{`+q(f)+`:{"amount":1},`+q(f)+`:{"amount":2}}`), // duplicate objects
			[]byte(`{`+q(strings.ToUpper(f))+`:"x"}`),               // case variant
			[]byte(`{`+q(titleSnake(f))+`:"x"}`),                    // Customer_ID style
			[]byte(`{`+q(f)+`:"x",`+q(strings.ToUpper(f))+`:"y"}`),  // both spellings
			[]byte(`{`+q(unicodeFold(f))+`:"x"}`),                   // K (Kelvin) and ſ fold to k and s
			[]byte(`{`+q(f)+`:"x","tenant_id":"b"}`),                // unknown field
			[]byte(one+`{}`), []byte(one+`x`), []byte(one+`,`), []byte(one+"\x00"), // trailing data
			[]byte(`{`+q(f)+`:1e400}`), []byte(`{`+q(f)+`:9223372036854775808}`), []byte(`{`+q(f)+`:-9223372036854775809}`),
			[]byte(`{`+q(f)+`:9223372036854775807}`), []byte(`{`+q(f)+`:1.5}`), []byte(`{`+q(f)+`:-0}`), []byte(`{`+q(f)+`:1e2}`),
			[]byte(`{`+q(f)+`:{"amount":9223372036854775807,"currency":"EUR"}}`),
			[]byte(`{`+q(f)+`:{"Amount":1}}`),
			[]byte("{"+q(f)+":\"\xff\xfe\"}"), // invalid UTF-8
			[]byte("{"+q(f)+":\"a\x00b\"}"),   // raw NUL: not JSON
			[]byte(`{`+q(f)+`:"a\u0000b"}`),   // escaped NUL: JSON, but PostgreSQL text refuses it
			[]byte(`{`+q(f)+`:"\u2028<script>"}`),
			[]byte(`{`+q(f)+`:"a\ud800"}`),      // lone surrogate: encoding/json makes it U+FFFD
			[]byte(`{`+q(f)+`:"\ud83d\ude00"}`), // a surrogate pair: fine
			[]byte(`{`+q(f)+`:true}`), []byte(`{`+q(f)+`:[]}`), []byte(`{`+q(f)+`:{}}`),
			[]byte(`{`+q(f)+`:[1,2]}`), []byte(`{`+q(f)+`:[{}]}`), []byte(`{`+q(f)+`:{"a":1,"a":2}}`),
		)
	}
	return s
}

// titleSnake turns "customer_id" into "Customer_Id".
func titleSnake(s string) string {
	parts := strings.Split(s, "_")
	for i, p := range parts {
		if p != "" {
			parts[i] = strings.ToUpper(p[:1]) + p[1:]
		}
	}
	return strings.Join(parts, "_")
}

// unicodeFold swaps k and s for the non-ASCII runes encoding/json's
// case-insensitive matching folds onto them.
func unicodeFold(s string) string {
	return strings.NewReplacer("k", "\u212a", "s", "\u017f").Replace(s)
}

// Check decodes body with httpapi.DecodeStrict into newDst() and asserts
// the contract: the decode takes less than Budget; a rejection is an
// *httpapi.Error of status 400 with a short, valid message; an accepted
// body is one JSON object without duplicate, unknown or case-variant keys,
// encoding/json's own decoding of it agrees, no string in it holds U+0000,
// and its value re-encodes and decodes to the same value. It returns the
// decoded value, or nil.
func Check(t testing.TB, body []byte, newDst func() any) any {
	t.Helper()
	dst := newDst()
	err := timed(t, func() error { return httpapi.DecodeStrict(body, dst) })
	if err != nil {
		CheckRejection(t, err, http400)
		return nil
	}

	if !utf8.Valid(body) {
		t.Fatalf("accepted invalid UTF-8: %.200q", body)
	}
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		t.Fatalf("accepted a body that is not a JSON object: %.200q", body)
	}
	if err := checkKeys(body, reflect.TypeOf(dst)); err != nil {
		t.Fatalf("accepted %.200q: %v", body, err)
	}
	// encoding/json turns a lone surrogate escape into U+FFFD: an accepted
	// body may decode to no more U+FFFD than it spells (raw or \ufffd).
	var generic any
	if err := json.Unmarshal(body, &generic); err == nil {
		spelled := bytes.Count(body, []byte("\uFFFD")) + bytes.Count(bytes.ToLower(body), []byte(`\ufffd`))
		if got := countFFFD(generic); got > spelled {
			t.Fatalf("accepted %.200q, which decodes to %d U+FFFD but spells %d: a lone surrogate was replaced", body, got, spelled)
		}
	}
	// Differential: plain encoding/json must read the same value (it
	// would differ on duplicate or case-variant keys).
	plain := newDst()
	if err := json.Unmarshal(body, plain); err != nil {
		t.Fatalf("accepted %.200q, which encoding/json rejects: %v", body, err)
	}
	if !reflect.DeepEqual(plain, dst) {
		t.Fatalf("accepted %.200q as %#v, encoding/json reads %#v", body, dst, plain)
	}
	// Round trip.
	enc, err := json.Marshal(dst)
	if err == nil {
		var generic any
		if err := json.Unmarshal(enc, &generic); err != nil || hasNUL(generic) {
			t.Fatalf("accepted %.200q, whose strings hold U+0000 (PostgreSQL cannot store it): %v", body, err)
		}
	}
	if err != nil {
		t.Fatalf("accepted %.200q but cannot re-encode %#v: %v", body, dst, err)
	}
	again := newDst()
	if err := httpapi.DecodeStrict(enc, again); err != nil {
		t.Fatalf("accepted %.200q but rejects its re-encoding %.200s: %v", body, enc, err)
	}
	if !reflect.DeepEqual(again, dst) {
		t.Fatalf("round trip of %.200q: %#v became %#v", body, dst, again)
	}
	return dst
}

// countFFFD counts U+FFFD in the strings and keys of v.
func countFFFD(v any) int {
	n := 0
	switch v := v.(type) {
	case string:
		n = strings.Count(v, "\uFFFD")
	case []any:
		for _, e := range v {
			n += countFFFD(e)
		}
	case map[string]any:
		for k, e := range v {
			n += strings.Count(k, "\uFFFD") + countFFFD(e)
		}
	}
	return n
}

// hasNUL reports whether a string or key anywhere in v holds U+0000.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

var (
	http400 = []int{400}
	// HTTPStatuses are the statuses a body decoder may reject with.
	HTTPStatuses = []int{400, 413, 415}
)

// CheckRejection asserts that err is an *httpapi.Error with one of
// statuses, a code and a short valid message that renders as the error
// shape.
func CheckRejection(t testing.TB, err error, statuses []int) {
	t.Helper()
	var apiErr *httpapi.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("rejection %v (%T) is not an *httpapi.Error", err, err)
	}
	ok := false
	for _, s := range statuses {
		ok = ok || apiErr.Status == s
	}
	if !ok {
		t.Fatalf("rejection %v has status %d, want one of %v", err, apiErr.Status, statuses)
	}
	if apiErr.Code == "" || apiErr.Message == "" || len(apiErr.Message) > maxMessage || !utf8.ValidString(apiErr.Message) {
		t.Fatalf("rejection has code %q and message %.200q (%d bytes)", apiErr.Code, apiErr.Message, len(apiErr.Message))
	}
	var shape struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(httpapi.ErrorBody(apiErr.Code, apiErr.Message), &shape); err != nil || shape.Error.Code != apiErr.Code {
		t.Fatalf("error body does not round-trip: %v", err)
	}
}

// timed runs f and fails when it costs more than Budget three times in a
// row: a slow input is slow every time, a descheduled test is not. The
// cost is the CPU time of the thread running f where the OS tells it
// (Linux), so a busy machine does not fail the test; else wall time.
func timed(t testing.TB, f func() error) error {
	t.Helper()
	var err error
	cheapest := time.Duration(1<<63 - 1)
	for range 3 {
		var d time.Duration
		d, err = measure(f)
		cheapest = min(cheapest, d)
		if cheapest <= budget() {
			return err
		}
	}
	t.Fatalf("decode took %v (budget %v)", cheapest, budget())
	return err
}

// measure runs f on a locked OS thread and returns the CPU time that
// thread spent, or the wall time where that is unknown.
func measure(f func() error) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	cpu0, ok0 := threadCPU()
	err := f()
	cpu1, ok1 := threadCPU()
	if ok0 && ok1 {
		return cpu1 - cpu0, err
	}
	return time.Since(start), err
}

// Timed is timed for other parsers: it fails when f takes longer than
// Budget on three tries.
func Timed(t testing.TB, f func()) {
	t.Helper()
	timed(t, func() error { f(); return nil })
}

// checkKeys is an independent oracle for the key rules: in every object no
// key appears twice, and in every object decoded into a struct each key is
// exactly (case-sensitively) a field's JSON name.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	return walk(dec, t)
}

func walk(dec *json.Decoder, t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var names map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			names = map[string]reflect.Type{}
			for i := range t.NumField() {
				f := t.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if !f.IsExported() || name == "-" {
					continue
				}
				if name == "" {
					name = f.Name
				}
				names[name] = f.Type
			}
		}
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Map {
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key := k.(string)
			if seen[key] {
				return errors.New("duplicate key " + key)
			}
			seen[key] = true
			ft := elem
			if names != nil {
				var ok bool
				if ft, ok = names[key]; !ok {
					return errors.New("key " + key + " is not a field's exact name")
				}
			}
			if err := walk(dec, ft); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walk(dec, elem); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	}
	return nil
}
