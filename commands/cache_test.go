package commands

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/strata-es/strata/domain/event"
)

type noted struct {
	Note string `json:"note"`
	Qty  int    `json:"qty"`
}

func (noted) EventType() string { return "test.noted" }

// The packed history decodes to what the records decode to, upcasting an
// old schema version; extending it leaves the original untouched.
func TestPackedHistoryRoundTrip(t *testing.T) {
	reg := event.NewRegistry(event.Codec{
		Type: "test.noted", Version: 2,
		New: func() event.Payload { return &noted{} },
		Upcasters: map[int]event.Upcaster{1: func(raw json.RawMessage) (json.RawMessage, error) {
			var v1 struct{ Text string }
			if err := json.Unmarshal(raw, &v1); err != nil {
				return nil, err
			}
			return json.Marshal(noted{Note: v1.Text, Qty: 1})
		}},
	})
	recs := []event.Record{
		{Type: "test.noted", SchemaVersion: 1, Data: json.RawMessage(`{"Text":"old"}`)},
		{Type: "test.noted", SchemaVersion: 2, Data: json.RawMessage(`{"note":"new","qty":3}`)},
	}
	packed := packRecords(recs)
	got, err := packed.decode(reg, cacheKey{"t", "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := []event.Payload{noted{Note: "old", Qty: 1}, noted{Note: "new", Qty: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}

	before := string(packed)
	typ, sv, data, err := reg.Encode(noted{Note: "third", Qty: 7})
	if err != nil {
		t.Fatal(err)
	}
	longer := packed.with([]packedEvent{{typ: typ, sv: sv, data: data}})
	if string(packed) != before {
		t.Fatal("with changed the history it extended")
	}
	got, err = longer.decode(reg, cacheKey{"t", "s"})
	if err != nil {
		t.Fatal(err)
	}
	if want := append(want, noted{Note: "third", Qty: 7}); !reflect.DeepEqual(got, want) {
		t.Fatalf("extended history decoded %+v, want %+v", got, want)
	}

	for n := 1; n < len(longer); n++ { // every truncation is refused, never misread
		if p, err := longer[:n].decode(reg, cacheKey{"t", "s"}); err == nil && len(p) == 3 {
			t.Fatalf("a history cut at %d of %d bytes decoded whole", n, len(longer))
		}
	}
}

// The cache holds at most its budget of bytes, forgetting the least
// recently used streams first, and never a history bigger than the budget.
func TestHistoryCacheBudget(t *testing.T) {
	c := newHistoryCache(4096)
	hist := func(n int) packedHistory { return make(packedHistory, n) }
	key := func(i int) cacheKey { return cacheKey{"t", fmt.Sprintf("order-%03d", i)} }
	for i := range 40 {
		c.put(key(i), hist(500))
		if c.bytes > c.budget {
			t.Fatalf("after %d puts: %d bytes, budget %d", i+1, c.bytes, c.budget)
		}
	}
	per := entryBytes(key(0), hist(500))
	if kept := c.streams.Len(); kept != 4096/per {
		t.Fatalf("%d streams kept, want %d (%d bytes each)", kept, 4096/per, per)
	}
	if _, ok := c.get(key(39)); !ok {
		t.Fatal("the most recent stream was forgotten")
	}
	if _, ok := c.get(key(0)); ok {
		t.Fatal("the oldest stream is still kept")
	}
	// Replacing a history accounts for the old one; dropping frees it.
	c.put(key(39), hist(100))
	c.drop(key(38))
	sum := 0
	for i := range 40 {
		if h, ok := c.get(key(i)); ok {
			sum += entryBytes(key(i), h)
		}
	}
	if sum != c.bytes {
		t.Fatalf("entries hold %d bytes, the cache counts %d", sum, c.bytes)
	}
	c.put(key(99), hist(5000))
	if _, ok := c.get(key(99)); ok {
		t.Fatal("a history bigger than the budget was kept")
	}
}
