package esdb

import (
	"errors"
	"strings"
	"testing"
)

func TestNamingRoundTrip(t *testing.T) {
	t.Parallel()
	n, err := newNaming("strata")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ tenant, stream, name string }{
		{"acme", "order-42", "strata-acme.order-42"},
		{"t-a", "s", "strata-t-a.s"},
		{"a", "order-A.b_c-9", "strata-a.order-A.b_c-9"},
		{"0-0", "...", "strata-0-0...."},
		{"x-", "-", "strata-x-.-"},
		{strings.Repeat("t", 63), strings.Repeat("S", 200), "strata-" + strings.Repeat("t", 63) + "." + strings.Repeat("S", 200)},
	}
	for _, c := range cases {
		name, err := n.encode(c.tenant, c.stream)
		if err != nil {
			t.Errorf("encode(%q, %q): %v", c.tenant, c.stream, err)
			continue
		}
		if name != c.name {
			t.Errorf("encode(%q, %q) = %q, want %q", c.tenant, c.stream, name, c.name)
		}
		tenant, stream, ok := n.decode(name)
		if !ok || tenant != c.tenant || stream != c.stream {
			t.Errorf("decode(%q) = %q, %q, %v; want %q, %q", name, tenant, stream, ok, c.tenant, c.stream)
		}
	}
}

func TestNamingRejects(t *testing.T) {
	t.Parallel()
	n, _ := newNaming("strata")
	for _, c := range []struct{ tenant, stream string }{
		{"", "s"},
		{"t", ""},
		{"T", "s"},    // tenants are lower case
		{"t.a", "s"},  // a '.' in the tenant would move the split
		{"t_a", "s"},  // not a tenant character
		{"t a", "s"},  // spaces
		{"t", "a/b"},  // not a stream character
		{"t", "a b"},  // spaces
		{"t", "$all"}, // no '$' anywhere
		{"t", "é"},    // ASCII only
		{"t", "s\n"},  // control characters
		{strings.Repeat("t", 64), "s"},
		{"t", strings.Repeat("s", 201)},
	} {
		if name, err := n.encode(c.tenant, c.stream); !errors.Is(err, ErrInvalidName) {
			t.Errorf("encode(%q, %q) = %q, %v; want ErrInvalidName", c.tenant, c.stream, name, err)
		}
	}
	for _, name := range []string{
		"",
		"strata",
		"strata-",
		"strata-t",     // no '.': not a tenant stream (e.g. the ping stream)
		"strata-t.",    // empty stream
		"strata-.s",    // empty tenant
		"strata-T.s",   // tenant not lower case
		"strata-t_a.s", // bad tenant character
		"strata-t.a/b", // bad stream character
		"stratax-t.s",  // another namespace that shares the text
		"strata_b-t.s", // another namespace
		"other-t.s",    // another namespace
		"$$strata-t.s", // its metadata stream
		"$et-x.y",      // system
		"$ce-strata",   // category projection
		" strata-t.s",  // leading space
		"strata-t.s ",  // trailing space
		"strata-" + strings.Repeat("t", 64) + ".s",
	} {
		if tenant, stream, ok := n.decode(name); ok {
			t.Errorf("decode(%q) = %q, %q; want not a strata stream", name, tenant, stream)
		}
	}
}

// TestNamespacesDoNotOverlap: the prefix of one namespace never matches a
// stream of another, because namespaces contain no '-'.
func TestNamespacesDoNotOverlap(t *testing.T) {
	t.Parallel()
	spaces := []string{"strata", "strata_b", "s", "st", "stratab", "a1", "a1_"}
	for _, a := range spaces {
		na, err := newNaming(a)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range spaces {
			nb, _ := newNaming(b)
			name, err := nb.encode("t-1", "order-1")
			if err != nil {
				t.Fatal(err)
			}
			matches := strings.HasPrefix(name, na.prefix)
			if _, _, ok := na.decode(name); ok != (a == b) || matches != (a == b) {
				t.Errorf("namespace %q claims %q (decode %v, prefix %v)", a, name, ok, matches)
			}
		}
	}
	for _, bad := range []string{"", "Strata", "1strata", "a-b", "a.b", "a b", "$all", strings.Repeat("a", 33)} {
		if _, err := newNaming(bad); err == nil {
			t.Errorf("namespace %q accepted", bad)
		}
	}
}

func FuzzNaming(f *testing.F) {
	for _, s := range []string{"strata-t.s", "strata-a-b.c.d", "strata-.x", "x", "strata-t.", "strata-tt"} {
		f.Add(s)
	}
	n, _ := newNaming("strata")
	f.Fuzz(func(t *testing.T, name string) {
		tenant, stream, ok := n.decode(name)
		if !ok {
			return
		}
		again, err := n.encode(tenant, stream)
		if err != nil || again != name {
			t.Fatalf("decode(%q) = %q, %q but encode gives %q, %v", name, tenant, stream, again, err)
		}
	})
}
