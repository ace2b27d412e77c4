package event_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/strata-es/strata/domain/event"
)

func TestPositionCompare(t *testing.T) {
	t.Parallel()
	// Sorted ascending; Compare must agree with the index order.
	ordered := []event.Position{{0, 0}, {0, 1}, {0, math.MaxUint64}, {1, 0}, {1, 1}, {2, 0}, {math.MaxUint64, 0}, {math.MaxUint64, math.MaxUint64}}
	for i, p := range ordered {
		for j, q := range ordered {
			want := 0
			switch {
			case i < j:
				want = -1
			case i > j:
				want = 1
			}
			if got := p.Compare(q); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", p, q, got, want)
			}
			if got := p.Less(q); got != (i < j) {
				t.Errorf("%v.Less(%v) = %v", p, q, got)
			}
		}
	}
	shuffled := []event.Position{ordered[4], ordered[7], ordered[0], ordered[2], ordered[6], ordered[1], ordered[5], ordered[3]}
	slices.SortFunc(shuffled, event.Position.Compare)
	if !slices.Equal(shuffled, ordered) {
		t.Errorf("sorted by Compare: %v", shuffled)
	}
}

func TestPositionIsZeroString(t *testing.T) {
	t.Parallel()
	if !(event.Position{}).IsZero() || (event.Position{Minor: 1}).IsZero() || (event.Position{Major: 1}).IsZero() {
		t.Error("IsZero is true only for the zero Position")
	}
	if got := (event.Position{Major: 12, Minor: 3}).String(); got != "12/3" {
		t.Errorf("String = %q", got)
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    event.Position
		want string
	}{
		{event.Position{}, "p1.MC4w"},     // "0.0"
		{event.Position{1, 1}, "p1.MS4x"}, // "1.1"
		{event.Position{math.MaxUint64, 0}, "p1.M3c1ZTExMjY0c2dzZi4w"},
	} {
		if got := tc.p.Token(); got != tc.want {
			t.Errorf("%v.Token() = %q, want %q (tokens are held by clients: the format must not drift)", tc.p, got, tc.want)
		}
		if p, err := event.ParseToken(tc.want); err != nil || p != tc.p {
			t.Errorf("ParseToken(%q) = %v, %v", tc.want, p, err)
		}
	}
}

func TestParseTokenRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",                        // empty
		"p1.",                     // no payload
		"MC4w",                    // no prefix
		"p2.MC4w",                 // unknown version
		"P1.MC4w",                 // prefix case
		"p1.MC4w=",                // padding
		"p1.MDAuMA",               // "00.0": leading zero
		"p1.MC4wLjA",              // "0.0.0"
		"p1.LjA",                  // ".0"
		"p1.MC4",                  // "0."
		"p1.QS5C",                 // "A.B": upper case base 36
		"p1.MS4tMQ",               // "1.-1"
		"p1.KzEuMQ",               // "+1.1"
		"p1.IDEuMQ",               // " 1.1"
		"p1.MS4xIA",               // "1.1 "
		"p1.MDAwMDAwMDAwMDAwMS4x", // "0000000000001.1"
		"p1.M3c1ZTExMjY0c2dzZy4w", // 2^64: overflows uint64
		"p1.MS4x\n",
		"p1.MS4x ",
		"p1.MS4+", // standard, not URL, alphabet
		"p1.MS5",  // non-canonical trailing bits
		"p1.\xff",
		"p1." + string(make([]byte, 200)),
	} {
		p, err := event.ParseToken(s)
		if !errors.Is(err, event.ErrBadToken) {
			t.Errorf("ParseToken(%q) = %v, %v; want ErrBadToken", s, p, err)
		}
	}
}

func TestPlacedToken(t *testing.T) {
	p := event.Position{Major: 987654, Minor: 321}
	if got := event.PlacedToken("", 7, p); got != p.Token() {
		t.Fatalf("the shared database's token is %q, want the plain %q", got, p.Token())
	}
	tok := event.PlacedToken("eu-1", 3, p)
	placement, epoch, back, err := event.ParsePlacedToken(tok)
	if err != nil || placement != "eu-1" || epoch != 3 || back != p {
		t.Fatalf("event.ParsePlacedToken(%q) = %q %d %v %v", tok, placement, epoch, back, err)
	}
	if placement, _, back, err := event.ParsePlacedToken(p.Token()); err != nil || placement != "" || back != p {
		t.Fatalf("a plain token: %q %v %v", placement, back, err)
	}
	for _, bad := range []string{"~1~" + p.Token(), "eu~0~" + p.Token(), "eu~01~" + p.Token(), "EU~1~" + p.Token(), "eu~1~x", "eu~1~" + p.Token() + "~", "eu~~" + p.Token()} {
		if _, _, _, err := event.ParsePlacedToken(bad); err == nil {
			t.Errorf("event.ParsePlacedToken(%q) accepted", bad)
		}
	}
}

func FuzzParsePlacedToken(f *testing.F) {
	f.Add(event.PlacedToken("eu", 2, event.Position{Major: 5, Minor: 9}))
	f.Add(event.Position{Major: 1}.Token())
	f.Fuzz(func(t *testing.T, s string) {
		placement, epoch, p, err := event.ParsePlacedToken(s)
		if err == nil && event.PlacedToken(placement, epoch, p) != s {
			t.Fatalf("%q parses to %q %d %v, which is %q", s, placement, epoch, p, event.PlacedToken(placement, epoch, p))
		}
	})
}
