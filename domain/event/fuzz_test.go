package event_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
)

// budget is the most one ParseToken may take.
const budget = 100 * time.Millisecond

// tokenSeeds are consistency tokens Token makes and near misses of them.
func tokenSeeds() []string {
	s := []string{"", "p1.", "p1", "p2.MC4w", "P1.MC4w", "p1.MC4w", "p1.MC4w=", "p1.MC4x", "p1.MDAuMA", "p1.MC4wLjA",
		"p1.LjA", "p1.MC4", "p1.YS5i", "p1.QS5C", "p1.MS4tMQ", "p1.KzEuMQ", "p1.IDEuMQ", "p1.MS4xIA", "p1.MS4x\x00",
		"p1.\xff\xfe", "p1.MC4w\n", "p1./w", "p1.+/+/", "p1." + strings.Repeat("A", 200), strings.Repeat("p1.", 50),
		"p1.M3c1ZTExMjY0c2dzZy4w", // major 2^64 in base 36: overflows
		"p1.MDAwMDAwMDAwMDAwMS4x", // leading zeros
	}
	for _, p := range []event.Position{{}, {1, 0}, {0, 1}, {35, 36}, {math.MaxUint64, math.MaxUint64}, {1 << 40, 7}} {
		tok := p.Token()
		s = append(s, tok, tok+"A", tok[:len(tok)-1], strings.ToUpper(tok), tok+"=", " "+tok)
	}
	return s
}

// checkParseToken asserts ParseToken's contract on s: it is quick, every
// rejection is ErrBadToken, and it accepts s only if Token made s.
func checkParseToken(t *testing.T, s string) {
	t.Helper()
	var p event.Position
	var err error
	fastest := time.Hour
	for range 3 {
		start := time.Now()
		p, err = event.ParseToken(s)
		fastest = min(fastest, time.Since(start))
		if fastest <= budget {
			break
		}
	}
	if fastest > budget {
		t.Fatalf("ParseToken(%.100q) took %v", s, fastest)
	}
	if err != nil {
		if !errors.Is(err, event.ErrBadToken) {
			t.Fatalf("ParseToken(%.100q) = %v, want ErrBadToken", s, err)
		}
		if p != (event.Position{}) {
			t.Fatalf("ParseToken(%.100q) failed but returned %v", s, p)
		}
		return
	}
	if got := p.Token(); got != s {
		t.Fatalf("ParseToken(%q) accepted %v, whose token is %q: only Token's outputs may parse", s, p, got)
	}
}

func FuzzParseToken(f *testing.F) {
	for _, s := range tokenSeeds() {
		f.Add(s)
	}
	f.Fuzz(checkParseToken)
}

// FuzzTokenRoundTrip: every Position's token parses back to it.
func FuzzTokenRoundTrip(f *testing.F) {
	for _, p := range []event.Position{{}, {1, 0}, {0, 1}, {35, 36}, {math.MaxUint64, math.MaxUint64}, {math.MaxUint64, 0}, {1 << 40, 7}} {
		f.Add(p.Major, p.Minor)
	}
	f.Fuzz(func(t *testing.T, major, minor uint64) {
		p := event.Position{Major: major, Minor: minor}
		tok := p.Token()
		got, err := event.ParseToken(tok)
		if err != nil || got != p {
			t.Fatalf("ParseToken(%v.Token() = %q) = %v, %v", p, tok, got, err)
		}
		checkParseToken(t, tok)
	})
}

func TestParseTokenSeeds(t *testing.T) {
	t.Parallel()
	for _, s := range tokenSeeds() {
		checkParseToken(t, s)
	}
}
