package event

import (
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// member is one top-level member of a JSON object: its name and where its
// value is in the object's bytes.
type member struct {
	name       string
	start, end int // data[start:end] is the value
}

// topMembers returns the members of the JSON object data, in order,
// without decoding their values; ok is false when data is not one
// well-formed object (json.Valid decides, so that nothing malformed is
// spliced). Sealing and opening a field then only replaces its bytes:
// a decode of the whole object into a map and an encode of it back cost
// several times the encryption itself.
func topMembers(data []byte) (members []member, ok bool) {
	if !json.Valid(data) {
		return nil, false
	}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(data, i)
		if i < len(data) && data[i] == '}' {
			return members, true
		}
		kEnd := scanString(data, i)
		if kEnd < 0 {
			return nil, false
		}
		name := string(data[i+1 : kEnd-1])
		if slices.Contains(data[i+1:kEnd-1], '\\') || !utf8.Valid(data[i+1:kEnd-1]) {
			if json.Unmarshal(data[i:kEnd], &name) != nil {
				return nil, false
			}
		}
		i = skipSpace(data, kEnd)
		if i >= len(data) || data[i] != ':' {
			return nil, false
		}
		start := skipSpace(data, i+1)
		end := scanValue(data, start)
		if end < 0 {
			return nil, false
		}
		members = append(members, member{name: name, start: start, end: end})
		i = skipSpace(data, end)
		if i >= len(data) {
			return nil, false
		}
		switch data[i] {
		case ',':
			i++
		case '}':
			return members, true
		default:
			return nil, false
		}
	}
}

// scanString returns the index after the string that starts at data[i].
func scanString(data []byte, i int) int {
	if i >= len(data) || data[i] != '"' {
		return -1
	}
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// scanValue returns the index after the value that starts at data[i]
// (data is valid JSON: only the value's extent is found).
func scanValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return scanString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				end := scanString(data, i)
				if end < 0 {
					return -1
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	default:
		for ; i < len(data); i++ {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
		}
		return i
	}
}

// splice returns data with the values of members replaced: values[k] for
// members[k] where values[k] is not nil.
func splice(data []byte, members []member, values [][]byte) []byte {
	n := len(data)
	for k, v := range values {
		if v != nil {
			n += len(v) - (members[k].end - members[k].start)
		}
	}
	out := make([]byte, 0, n)
	last := 0
	for k, v := range values {
		if v == nil {
			continue
		}
		out = append(out, data[last:members[k].start]...)
		out = append(out, v...)
		last = members[k].end
	}
	return append(out, data[last:]...)
}
