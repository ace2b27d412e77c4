package readmodels

import (
	"testing"
	"time"
)

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []Cursor{
		{At: time.Date(2026, 4, 1, 10, 0, 0, 123456000, time.UTC), Key: "o-1"},
		{At: time.Date(1969, 12, 31, 23, 59, 59, 1000, time.UTC), Key: "a.b_c-D"},
	} {
		got, err := ParseCursor(c.Encode())
		if err != nil || !got.At.Equal(c.At) || got.Key != c.Key {
			t.Errorf("ParseCursor(Encode(%v)) = %v, %v", c, got, err)
		}
	}
	good := Cursor{At: time.Unix(1, 0), Key: "o-1"}.Encode()
	for _, bad := range []string{"", "c1.", "c2." + good[3:], good + "A", good[:len(good)-1], "c1.MTIz", "c1.eC5vLTE", "c1.MS5vIDE",
		"c1.MDEuby0x" /* leading zero */} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) accepted", bad)
		}
	}
}
