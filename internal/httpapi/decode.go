package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
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
// valid UTF-8 (encoding/json alone would silently replace invalid bytes).
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

func badJSON(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field != "" {
			return Errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("field %q has the wrong type (want %s)", typeErr.Field, jsonKind(typeErr.Type)))
		}
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body must be a JSON object")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is not valid JSON")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "unknown field "+strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is not valid JSON")
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

// checkKeys walks the JSON tokens of body alongside the Go type it will be
// decoded into and rejects duplicate keys, keys that match a field only
// case-insensitively, and nesting deeper than maxDepth.
func checkKeys(body []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return badJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body must be a JSON object")
	}
	return walkObject(dec, deref(t), 1, "")
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func walkObject(dec *json.Decoder, t reflect.Type, depth int, path string) error {
	if depth > maxDepth {
		return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is nested too deeply")
	}
	fields := jsonFields(t)
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badJSON(err)
		}
		key := tok.(string)
		if seen[key] {
			return Errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("duplicate field %q", path+key))
		}
		seen[key] = true
		var ft reflect.Type
		if fields != nil {
			f, ok := fields[key]
			if !ok {
				return Errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("unknown field %q", path+key))
			}
			ft = f
		}
		if err := walkValue(dec, ft, depth, path+key+"."); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return badJSON(err)
	}
	return nil
}

func walkValue(dec *json.Decoder, t reflect.Type, depth int, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return badJSON(err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	t = deref(t)
	switch d {
	case '{':
		if t != nil && t.Kind() != reflect.Struct {
			t = nil // maps and interfaces: keys are data, not fields
		}
		return walkObject(dec, t, depth+1, path)
	case '[':
		if depth+1 > maxDepth {
			return Errorf(http.StatusBadRequest, CodeInvalidRequest, "request body is nested too deeply")
		}
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for dec.More() {
			if err := walkValue(dec, et, depth+1, path); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		if err != nil {
			return badJSON(err)
		}
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
