package httpapi_test

import (
	"bytes"
	"errors"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/strata-es/strata/httpapi"
	"github.com/strata-es/strata/httpapi/decodetest"
)

// fuzzDoc has a field of every shape DecodeStrict must walk: scalars,
// pointers to structs, slices of structs, maps and free-form values.
type fuzzDoc struct {
	Name     string            `json:"name"`
	Count    int64             `json:"count"`
	Small    uint8             `json:"small"`
	Ratio    float64           `json:"ratio"`
	OK       bool              `json:"ok"`
	Tags     []string          `json:"tags"`
	Inner    *fuzzInner        `json:"inner"`
	Items    []fuzzInner       `json:"items"`
	Attrs    map[string]string `json:"attrs"`
	Any      any               `json:"any"`
	Omitted  string            `json:"omitted,omitempty"`
	Untagged string
	Skipped  string `json:"-"`
}

type fuzzInner struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

var docFields = []string{"name", "count", "small", "ratio", "ok", "tags", "inner", "items", "attrs", "any", "omitted", "Untagged", "Skipped", "-"}

func newDoc() any { return new(fuzzDoc) }

func docSeeds() [][]byte {
	return append(decodetest.Seeds(docFields...),
		[]byte(`{"name":"n","count":-1,"small":255,"ratio":1.5e300,"ok":true,"tags":["a",""],"inner":{"amount":1,"currency":"EUR"},`+
			`"items":[{"amount":2},{"currency":"USD"}],"attrs":{"k":"v","K":"w"},"any":{"x":[1,{"y":null}]},"omitted":"o","Untagged":"u"}`),
		[]byte(`{"small":256}`), []byte(`{"small":-1}`), []byte(`{"ratio":1e400}`), []byte(`{"ratio":-0.0}`),
		[]byte(`{"attrs":{"k":"v","k":"w"}}`), []byte(`{"any":{"k":1,"k":2}}`), []byte(`{"items":[{"amount":1,"Amount":2}]}`),
		[]byte(`{"inner":{"AMOUNT":1}}`), []byte(`{"untagged":"u"}`), []byte(`{"any":9223372036854775808}`),
		[]byte(`{"any":`+strings.Repeat(`[`, 15)+strings.Repeat(`]`, 15)+`}`),
		[]byte(`{"any":`+strings.Repeat(`[`, 16)+strings.Repeat(`]`, 16)+`}`),
	)
}

func FuzzDecodeStrict(f *testing.F) {
	for _, s := range docSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		decodetest.Check(t, body, newDoc)
	})
}

// FuzzDecodeJSON drives the HTTP entry point: the content type and the
// body together decide, and the outcome must equal DecodeStrict's on an
// accepted content type.
func FuzzDecodeJSON(f *testing.F) {
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/problem+json", "",
		"text/plain", "application/jsonx", "application/json;", "APPLICATION/JSON", "multipart/form-data; boundary=x"} {
		for _, s := range [][]byte{nil, []byte(`{"name":"x"}`), []byte(`{"name":"x","name":"y"}`), []byte(`[]`)} {
			f.Add(ct, s)
		}
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		var got fuzzDoc
		var err error
		decodetest.Timed(t, func() {
			r.Body = httptestBody(body)
			got = fuzzDoc{}
			err = httpapi.DecodeJSON(httptest.NewRecorder(), r, &got)
		})
		if err != nil {
			decodetest.CheckRejection(t, err, decodetest.HTTPStatuses)
		}
		var apiErr *httpapi.Error
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusUnsupportedMediaType {
			if jsonType(contentType) {
				t.Fatalf("content type %q rejected with 415", contentType)
			}
			return
		}
		if contentType != "" && !jsonType(contentType) {
			t.Fatalf("content type %q accepted", contentType)
		}
		if contentType == "" && len(body) > 0 {
			t.Fatalf("a body without content type accepted")
		}
		var want fuzzDoc
		wantErr := httpapi.DecodeStrict(body, &want)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("DecodeJSON says %v, DecodeStrict says %v", err, wantErr)
		}
	})
}

func jsonType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func httptestBody(b []byte) readCloser { return readCloser{bytes.NewReader(b)} }

// TestDecodeStrictSeeds runs the fuzz seeds as plain tests, so that go
// test without -fuzz checks every hostile input, and pins the outcome of
// the ones that matter.
func TestDecodeStrictSeeds(t *testing.T) {
	t.Parallel()
	for _, s := range docSeeds() {
		decodetest.Check(t, s, newDoc)
	}
	for _, tc := range []struct {
		body string
		want string // "" = accepted, else a fragment of the message
	}{
		{`{"name":"x"}`, ""},
		{`{"name":"x","name":"y"}`, `duplicate field "name"`},
		{`{"Name":"x"}`, `unknown field "Name"`},
		{`{"na\u006de":"x"}`, ""}, // an escaped key is the same key
		{"{\"\u212a\":1}", "unknown field"},
		{`{"inner":{"amount":1,"amount":2}}`, `duplicate field "inner.amount"`},
		{`{"items":[{"Currency":"x"}]}`, `unknown field "items.Currency"`},
		{`{"attrs":{"a":"1","a":"2"}}`, `duplicate field "attrs.a"`},
		{`{"tenant_id":"b"}`, `unknown field "tenant_id"`},
		{`{"name":"x"} {}`, "data after the JSON object"},
		{`{"name":"x"}x`, "data after the JSON object"},
		{`{"count":1e400}`, `field "count" has the wrong type`},
		{`{"count":9223372036854775808}`, `field "count" has the wrong type`},
		{`{"ratio":1e400}`, `field "ratio" has the wrong type`},
		{"{\"name\":\"\xff\"}", "not valid UTF-8"},
		{"{\"name\":\"a\x00\"}", "not valid JSON"},
		{`{"name":"a\u0000b"}`, "NUL character"},
		{`{"attrs":{"k\u0000":"v"}}`, "NUL character"},
		{`{"any":["\u0000"]}`, "NUL character"},
		{`{"name":"a\\u0000b"}`, ""}, // an escaped backslash, then text
		{`{"name":"a\ud800"}`, "lone surrogate"},
		{`{"name":"\udc00a"}`, "lone surrogate"},
		{`{"name":"\uDBFF\u0041"}`, "lone surrogate"},
		{`{"name":"\ud800\\udc00"}`, "lone surrogate"}, // then an escaped backslash, not an escape
		{`{"name":"\ud83d\ud83d"}`, "lone surrogate"},
		{`{"attrs":{"\ud800":"v"}}`, "lone surrogate"},
		{`{"any":["\ude00"]}`, "lone surrogate"},
		{`{"name":"\ud83d\ude00"}`, ""}, // a pair: U+1F600
		{`{"name":"\uD83D\uDE00\uFFFD"}`, ""},
		{`{"name":"\\ud800"}`, ""},          // an escaped backslash, then text
		{"{\"name\":\"\xef\xbf\xbd\"}", ""}, // U+FFFD itself is fine
		{``, "empty"},
		{`null`, "must be a JSON object"},
		{`[]`, "must be a JSON object"},
		{string(decodetest.Nest("[", "]", 10_000)), "must be a JSON object"},
		{`{"any":` + string(decodetest.Nest("[", "]", 10_000)) + `}`, "nested too deeply"},
		{string(decodetest.Nest(`{"any":`, "}", 10_000)), "nested too deeply"},
	} {
		var d fuzzDoc
		err := httpapi.DecodeStrict([]byte(tc.body), &d)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("DecodeStrict(%.40q) = %v, want accepted", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("DecodeStrict(%.40q) = %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}

// TestDecodeStrictLargeBodies holds DecodeStrict to the time budget on the
// most expensive bodies that fit in MaxBodyBytes. Before the walk rejected
// containers at scalar fields and counted values, the first one took 300
// ms of CPU.
func TestDecodeStrictLargeBodies(t *testing.T) {
	t.Parallel()
	n := httpapi.MaxBodyBytes - 64
	type command struct {
		CustomerID string   `json:"customer_id"`
		Tags       []string `json:"tags"`
	}
	newCommand := func() any { return new(command) }
	for _, tc := range []struct {
		body   string
		newDst func() any
		want   string
	}{
		{`{"customer_id":[` + strings.Repeat("0,", n/2) + `0]}`, newCommand, `field "customer_id" has the wrong type`},
		{`{"customer_id":{` + strings.Repeat(`"a":0,`, n/6) + `"a":0}}`, newCommand, `field "customer_id" has the wrong type`},
		{`{"tags":[` + strings.Repeat(`"",`, n/3) + `""]}`, newCommand, "more than 10000 values"},
		{`{"any":[` + strings.Repeat("0,", n/2) + `0]}`, newDoc, "more than 10000 values"},
		{`{"any":[` + strings.Repeat("{},", n/3) + `{}]}`, newDoc, "more than 10000 values"},
		{`{"attrs":{` + strings.Repeat(`"":"",`, n/6) + `"":""}}`, newDoc, "duplicate field"},
		{`{"customer_id":"` + strings.Repeat("x", n) + `"}`, newCommand, ""},
		{`{"customer_id":"` + strings.Repeat(`\u0041`, n/6) + `"}`, newCommand, ""},
		{`{"tags":[` + strings.Repeat(`"",`, 9_990) + `""]}`, newCommand, ""},
		{`{` + strings.Repeat(" ", n) + `}`, newDoc, ""},
		{strings.Repeat("[", n/2) + strings.Repeat("]", n/2), newDoc, "must be a JSON object"},
	} {
		v := decodetest.Check(t, []byte(tc.body), tc.newDst)
		if (v == nil) != (tc.want != "") {
			t.Errorf("DecodeStrict(%.40q...) accepted = %v, want %v", tc.body, v != nil, tc.want == "")
		}
		if tc.want != "" {
			if err := httpapi.DecodeStrict([]byte(tc.body), tc.newDst()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeStrict(%.40q...) = %v, want %q", tc.body, err, tc.want)
			}
		}
	}
}

func TestDecodeJSONLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		contentType string
		body        string
		status      int // 0 = accepted
	}{
		{"json", "application/json", `{"name":"x"}`, 0},
		{"json with charset", "application/json; charset=utf-8", `{"name":"x"}`, 0},
		{"suffix json", "application/vnd.strata+json", `{"name":"x"}`, 0},
		{"text", "text/plain", `{"name":"x"}`, 415},
		{"no content type", "", `{"name":"x"}`, 415},
		{"malformed content type", "application/json; =", `{"name":"x"}`, 415},
		{"too large", "application/json", `{"name":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`, 413},
		{"just below the limit", "application/json", `{"name":"` + strings.Repeat("x", httpapi.MaxBodyBytes-12) + `"}`, 0},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
		if tc.contentType != "" {
			r.Header.Set("Content-Type", tc.contentType)
		}
		var d fuzzDoc
		var err error
		decodetest.Timed(t, func() {
			r.Body = httptestBody([]byte(tc.body))
			err = httpapi.DecodeJSON(httptest.NewRecorder(), r, &d)
		})
		if tc.status == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		decodetest.CheckRejection(t, err, []int{tc.status})
	}
}
