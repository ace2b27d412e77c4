package event

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Tags (issue 31, dynamic consistency boundaries): an event may carry tags
// that name what it is about beyond its stream ("email:…", "seat:12A").
// A module declares them per event type (Codec.Tags); the engine stamps
// them on the event's metadata, so they travel wherever the event goes
// (moves, exports, imports, the relay). A command may then read the
// events matching a Query and append on the condition that none was
// appended since (eventstore.AppendCondition): an invariant across
// aggregates without a saga.

// Limits on tags: every tag of an event is locked by its append and
// indexed, so they are short and few.
const (
	MaxTagLength    = 200
	MaxTagsPerEvent = 16
)

// ValidTag reports why t cannot be a tag, or nil: a tag is 1 to
// MaxTagLength bytes of valid UTF-8 without control characters.
func ValidTag(t string) error {
	if t == "" || len(t) > MaxTagLength {
		return fmt.Errorf("tag %.40q: want 1 to %d bytes", t, MaxTagLength)
	}
	if !utf8.ValidString(t) || strings.ContainsFunc(t, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("tag %.40q: want printable UTF-8", t)
	}
	return nil
}

// NormalizeTags validates tags and returns them sorted without
// duplicates (nil for none), the form stored in Metadata.Tags.
func NormalizeTags(tags []string) ([]string, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	out := slices.Clone(tags)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > MaxTagsPerEvent {
		return nil, fmt.Errorf("%d tags on one event: at most %d", len(out), MaxTagsPerEvent)
	}
	for _, t := range out {
		if err := ValidTag(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// QueryItem matches the events that carry every one of Tags and, when
// Types is not empty, are of one of Types.
type QueryItem struct {
	Types []string `json:"types,omitempty"`
	Tags  []string `json:"tags"`
}

// Query matches the events matched by any of its items. Every item names
// at least one tag: a tag is what an append locks and what the log
// indexes, so a query by type alone would have to lock and read the
// whole tenant.
type Query []QueryItem

// Validate reports why q cannot be used.
func (q Query) Validate() error {
	if len(q) == 0 {
		return fmt.Errorf("query: no items")
	}
	for i, it := range q {
		if len(it.Tags) == 0 {
			return fmt.Errorf("query item %d: no tags (an item names at least one)", i)
		}
		if len(it.Tags) > MaxTagsPerEvent {
			return fmt.Errorf("query item %d: %d tags, at most %d", i, len(it.Tags), MaxTagsPerEvent)
		}
		for _, t := range it.Tags {
			if err := ValidTag(t); err != nil {
				return fmt.Errorf("query item %d: %w", i, err)
			}
		}
		for _, typ := range it.Types {
			if typ == "" {
				return fmt.Errorf("query item %d: empty type", i)
			}
		}
	}
	return nil
}

// Tags returns every tag the query names, sorted, once each.
func (q Query) Tags() []string {
	var out []string
	for _, it := range q {
		out = append(out, it.Tags...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Matches reports whether an event of type typ carrying tags matches q
// (the stores' definition, for fakes and models).
func (q Query) Matches(typ string, tags []string) bool {
	for _, it := range q {
		if (len(it.Types) == 0 || slices.Contains(it.Types, typ)) && containsAll(tags, it.Tags) {
			return true
		}
	}
	return false
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// TagDigest returns the tag name:digest of a value that must not be stored
// in plaintext (an e-mail address): equal values give equal tags, and the
// tag does not show the value. It is a pseudonym, not a secret: whoever
// knows a value can compute its tag, so it answers "is this address
// taken", never "whose address is this".
func TagDigest(name, value string) string {
	sum := sha256.Sum256([]byte("strata-tag/v1\x00" + name + "\x00" + value))
	return name + ":" + base64.RawURLEncoding.EncodeToString(sum[:18])
}
