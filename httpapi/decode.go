package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxBodyBytes is the largest request body accepted (413 beyond).
const MaxBodyBytes = 1 << 20

// maxDepth bounds nesting; no request of ours nests deeper than 4.
const maxDepth = 16

// ReadBody reads a JSON request body: it requires a JSON content type
// (415), at most MaxBodyBytes (413), and valid UTF-8 (400).
func ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, Errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "request body must be application/json")
		}
	} else if r.ContentLength != 0 {
		return nil, Errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "request body must be application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, Errorf(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
	}
	if err != nil {
		return nil, Errorf(http.StatusBadRequest, CodeInvalidRequest, "could not read the request body")
	}
	return body, nil
}

// DecodeJSON reads the body into dst (a pointer to a struct) strictly:
// exactly one JSON object; no unknown, duplicate or case-variant keys
// (encoding/json alone would accept "Customer_ID" for "customer_id" and
// keep the last of duplicate keys); no trailing data; matching types;
// valid UTF-8 and no lone surrogate escape (encoding/json alone would
// silently replace either with U+FFFD);
// no U+0000 in strings (PostgreSQL cannot store it); at most maxValues
// values.
// Every failure is a 400, 413 or 415 *Error.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	body, err := ReadBody(w, r)
	if err != nil {
		return err
	}
	return DecodeStrict(body, dst)
}

// DecodeStrict applies DecodeJSON's rules to body.
func DecodeStrict(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is empty")
	}
	if !utf8.Valid(body) {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is not valid UTF-8")
	}
	if hasLoneSurrogate(body) {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, `request body has a lone surrogate escape (\ud800-\udfff not in a pair), which is not valid UTF-16 or UTF-8`)
	}
	if err := checkKeys(body, reflect.TypeOf(dst)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return badJSON(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body has data after the JSON object")
	}
	return nil
}

// hasLoneSurrogate reports whether body has a \uXXXX escape of a UTF-16
// surrogate that is not half of a pair (a high one followed at once by an
// escaped low one). encoding/json decodes such an escape to U+FFFD, so
// "a\ud800" would be stored as "a\ufffd": the client's text silently
// changed, as invalid UTF-8 would be. Backslashes occur only inside strings
// in valid JSON, and an escaped backslash is skipped whole, so scanning the
// escapes of the raw body is exact; anything else is a syntax error that
// the decoder reports.
func hasLoneSurrogate(body []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '\\')
		if j < 0 {
			return false
		}
		i += j
		if i+1 >= len(body) {
			return false
		}
		if body[i+1] != 'u' {
			i += 2 // \", \\, \n, ...: one escaped character
			continue
		}
		r, ok := hex4(body, i+2)
		if !ok {
			return false // malformed: the decoder's syntax error
		}
		i += 6
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return true // a low surrogate with no high one before it
		case r >= 0xd800 && r <= 0xdbff:
			if i+1 >= len(body) || body[i] != '\\' || body[i+1] != 'u' {
				return true
			}
			lo, ok := hex4(body, i+2)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 6
		}
	}
}

// hex4 parses the four hex digits at body[i:i+4].
func hex4(body []byte, i int) (rune, bool) {
	if i+4 > len(body) {
		return 0, false
	}
	var r rune
	for _, c := range body[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func badJSON(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field != "" {
			return Errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("field %s has the wrong type (want %s)", quoteField(typeErr.Field), jsonKind(typeErr.Type)))
		}
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body must be a JSON object")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown field "+quoteField(field))
	}
	return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is not valid JSON")
}

// maxFieldInMessage bounds how much of a client's key an error message
// quotes back: a megabyte-long key must not come back whole.
const maxFieldInMessage = 64

// quoteField quotes a field path for an error message, cut to
// maxFieldInMessage bytes on a rune boundary.
func quoteField(path string) string {
	if len(path) <= maxFieldInMessage {
		return strconv.Quote(path)
	}
	cut := maxFieldInMessage
	for cut > 0 && !utf8.RuneStart(path[cut]) {
		cut--
	}
	return strconv.Quote(path[:cut]) + "..."
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	}
	return "object"
}

// maxValues bounds the JSON values (scalars, objects, arrays and keys) of a
// body. json.Decoder.Token costs about half a microsecond per value, so a
// megabyte of "[0,0,0,..." would otherwise cost a third of a second of CPU
// per request; no request of ours has more than a few dozen values.
const maxValues = 10_000

// checkKeys walks the JSON tokens of body alongside the Go type it will be
// decoded into and rejects duplicate keys, keys that match a field only
// case-insensitively, objects and arrays where the type wants a scalar,
// strings holding U+0000, nesting deeper than maxDepth and more than
// maxValues values.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := &walker{dec: dec}
	tok, err := w.token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body must be a JSON object")
	}
	return w.object(freeForm(deref(t)), 1, "")
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// freeForm returns nil for a type that decodes itself (its JSON shape is
// its own business, so only duplicate keys and depth are checked), else t.
func freeForm(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}
	for _, u := range []reflect.Type{t, reflect.PointerTo(t)} {
		if u.Implements(jsonUnmarshaler) || u.Implements(textUnmarshaler) {
			return nil
		}
	}
	return t
}

type walker struct {
	dec    *json.Decoder
	values int
}

func (w *walker) token() (json.Token, error) {
	if w.values++; w.values > maxValues {
		return nil, Errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("request body has more than %d values", maxValues))
	}
	tok, err := w.dec.Token()
	if err != nil {
		return nil, badJSON(err)
	}
	if s, ok := tok.(string); ok && strings.IndexByte(s, 0) >= 0 {
		// "\u0000" is valid JSON, but PostgreSQL text and jsonb cannot
		// hold U+0000: it would fail deep in the store as a 500.
		return nil, Errorf(http.StatusBadRequest, CodeInvalidRequest, `request body has a NUL character (\u0000) in a string`)
	}
	return tok, nil
}

func (w *walker) object(t reflect.Type, depth int, path string) error {
	if depth > maxDepth {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is nested too deeply")
	}
	fields := jsonFields(t)
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.token()
		if err != nil {
			return err
		}
		key := tok.(string)
		if seen[key] {
			return Errorf(http.StatusBadRequest, CodeInvalidRequest, "duplicate field "+quoteField(path+key))
		}
		seen[key] = true
		var ft reflect.Type
		if fields != nil {
			f, ok := fields[key]
			if !ok {
				return Errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown field "+quoteField(path+key))
			}
			ft = f
		} else if t != nil && t.Kind() == reflect.Map {
			ft = t.Elem()
		}
		if err := w.value(ft, depth, path+key); err != nil {
			return err
		}
	}
	_, err := w.token() // '}'
	return err
}

// value walks the value at path, which will be decoded into t (nil: any).
func (w *walker) value(t reflect.Type, depth int, path string) error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	t = freeForm(deref(t))
	if t != nil {
		switch k := t.Kind(); {
		case d == '{' && k != reflect.Struct && k != reflect.Map && k != reflect.Interface,
			d == '[' && k != reflect.Slice && k != reflect.Array && k != reflect.Interface:
			// Decode would say the same, but only after this walk had
			// gone through the whole value.
			return Errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("field %s has the wrong type (want %s)", quoteField(path), jsonKind(t)))
		}
	}
	switch d {
	case '{':
		if t != nil && t.Kind() != reflect.Struct && t.Kind() != reflect.Map {
			t = nil
		}
		return w.object(t, depth+1, path+".")
	case '[':
		if depth+1 > maxDepth {
			return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is nested too deeply")
		}
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for w.dec.More() {
			if err := w.value(et, depth+1, path); err != nil {
				return err
			}
		}
		_, err := w.token() // ']'
		return err
	}
	return nil
}

// jsonFields maps the exact JSON names of t's fields to their types; nil
// when t is not a struct (anything goes, the decoder checks types).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		out[name] = f.Type
	}
	return out
}
