package event

import (
	"encoding/json"
	"unicode/utf8"
)

// DecodeMetadata decodes an event's stored metadata, as json.Unmarshal
// into a Metadata does. Every event read from the log carries it, so the
// projections' runners decode one per event: in the command benchmark's
// CPU profile, encoding/json spent as much on these few strings as pgx
// spent scanning the whole row. The common shape, an object of plain
// string values (what json.Marshal and PostgreSQL's jsonb write), is read
// by hand, about five times faster; anything else (an escape, a value that
// is not a string, a key in another case, malformed input) goes to
// encoding/json, so value and error are exactly json.Unmarshal's
// (FuzzDecodeMetadata holds it to that).
func DecodeMetadata(b []byte) (Metadata, error) {
	if m, ok := parseFlatStrings(b); ok {
		return m, nil
	}
	var m Metadata
	err := json.Unmarshal(b, &m)
	return m, err
}

// parseFlatStrings reads {"k":"v",...} whose keys and values hold no
// backslash and no control character, with JSON whitespace anywhere
// between tokens. ok is false for any other input. Unknown keys are
// skipped, as encoding/json skips them; a key given twice keeps the last
// value, as encoding/json does; keys match exactly (encoding/json also
// matches case-insensitively, so such input is left to it).
func parseFlatStrings(b []byte) (m Metadata, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return m, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return m, skipSpace(b, i+1) == len(b)
	}
	for {
		key, j, ok := plainString(b, i)
		if !ok {
			return m, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return m, false
		}
		val, j, ok := plainString(b, skipSpace(b, i+1))
		if !ok {
			return m, false
		}
		switch key {
		case "command_id":
			m.CommandID = val
		case "correlation_id":
			m.CorrelationID = val
		case "causation_id":
			m.CausationID = val
		case "actor":
			m.Actor = val
		case "traceparent":
			m.TraceParent = val
		case "tracestate":
			m.TraceState = val
		default:
			if !lowerASCII(key) {
				return m, false // encoding/json would match it case-insensitively
			}
		}
		i = skipSpace(b, j)
		if i >= len(b) {
			return m, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return m, false
		}
	}
}

// plainString reads a JSON string at b[i] with no escape and no control
// character, valid UTF-8, and returns it and the index after its quote.
func plainString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !utf8.Valid(s) {
				return "", 0, false
			}
			return string(s), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// lowerASCII reports whether s has no upper-case ASCII letter and only
// ASCII: such a key can match no field of Metadata case-insensitively
// unless it equals one exactly.
func lowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' || c >= 0x80 {
			return false
		}
	}
	return true
}
