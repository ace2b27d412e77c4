package event_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/strata-es/strata/domain/event"
)

func TestNormalizeTags(t *testing.T) {
	got, err := event.NormalizeTags([]string{"b:2", "a:1", "b:2"})
	if err != nil || !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("NormalizeTags = %v, %v; want sorted, once each", got, err)
	}
	if got, err := event.NormalizeTags(nil); got != nil || err != nil {
		t.Fatalf("no tags: %v, %v", got, err)
	}
	for name, tags := range map[string][]string{
		"empty":   {""},
		"long":    {strings.Repeat("x", event.MaxTagLength+1)},
		"control": {"a\tb"},
		"utf-8":   {"a\xffb"},
	} {
		if _, err := event.NormalizeTags(tags); err == nil {
			t.Errorf("%s tag accepted", name)
		}
	}
}

func TestQueryMatches(t *testing.T) {
	q := event.Query{{Types: []string{"a.x"}, Tags: []string{"k:1", "r:eu"}}, {Tags: []string{"k:2"}}}
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		typ  string
		tags []string
		want bool
	}{
		{"a.x", []string{"k:1", "r:eu", "z"}, true},
		{"a.x", []string{"k:1"}, false}, // not every tag of the item
		{"b.y", []string{"k:1", "r:eu"}, false},
		{"b.y", []string{"k:2"}, true}, // an item without types
		{"b.y", nil, false},
	} {
		if got := q.Matches(tc.typ, tc.tags); got != tc.want {
			t.Errorf("%s %v: %v, want %v", tc.typ, tc.tags, got, tc.want)
		}
	}
	if !slices.Equal(q.Tags(), []string{"k:1", "k:2", "r:eu"}) {
		t.Fatalf("tags %v", q.Tags())
	}
	for name, bad := range map[string]event.Query{"none": {}, "no tags": {{Types: []string{"a.x"}}}, "empty type": {{Types: []string{""}, Tags: []string{"k"}}}} {
		if bad.Validate() == nil {
			t.Errorf("%s: valid", name)
		}
	}
}

// TestTagDigestStable pins the digest: it is stored, and a command
// guarding on a value must compute what an earlier one stored.
func TestTagDigestStable(t *testing.T) {
	got := event.TagDigest("email", "ann@example.com")
	if got != event.TagDigest("email", "ann@example.com") || got == event.TagDigest("email", "bob@example.com") || !strings.HasPrefix(got, "email:") || strings.Contains(got, "ann") {
		t.Fatalf("TagDigest = %q", got)
	}
	if got != "email:"+pinned {
		t.Fatalf("TagDigest changed: %q (stored tags would no longer match)", got)
	}
}

const pinned = "M9_Lm8nNmPeo1KuCB-cYTBW2"
