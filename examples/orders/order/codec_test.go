package order

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/domain/money"
)

// allEvents holds one populated example of every order event.
func allEvents() []event.Payload {
	return events(
		created(),
		added("p-1", 2, 150),
		removed("p-1"),
		placed(300),
		paid("pay-1", 300),
		cancelled("changed my mind"),
		cancelled(""),
		LineAdded{OrderID: oid, ProductID: "p-max", Quantity: MaxQuantity, UnitPrice: eur(math.MaxInt64 / MaxQuantity),
			At: time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC)},
	)
}

func TestRegistryTypes(t *testing.T) {
	t.Parallel()
	want := []string{TypeCancelled, TypeCreated, TypeLineAdded, TypeLineRemoved, TypePaid, TypePlaced}
	if got := Registry.Types(); !slices.Equal(got, want) {
		t.Fatalf("Types() = %v, want %v", got, want)
	}
	// The names are stored: they must never change.
	names := map[event.Payload]string{
		Created{}: "order.created", LineAdded{}: "order.line_added", LineRemoved{}: "order.line_removed",
		Placed{}: "order.placed", Paid{}: "order.paid", Cancelled{}: "order.cancelled",
	}
	for p, name := range names {
		if p.EventType() != name {
			t.Errorf("%T.EventType() = %q, want %q", p, p.EventType(), name)
		}
	}
	// Codecs returns fresh values: building more registries must not panic.
	_ = NewRegistry()
	_ = event.NewRegistry(Codecs()...)
}

func TestStreamID(t *testing.T) {
	t.Parallel()
	if got := StreamID("ord-1"); got != "order-ord-1" {
		t.Fatalf("StreamID = %q", got)
	}
	if id, ok := OrderIDFromStream(StreamID("ord-1")); !ok || id != "ord-1" {
		t.Fatalf("OrderIDFromStream(StreamID) = %q, %v", id, ok)
	}
	for _, s := range []string{"", "order-", "customer-1", "ord-1", "Order-1"} {
		if id, ok := OrderIDFromStream(s); ok {
			t.Errorf("OrderIDFromStream(%q) = %q, true", s, id)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	wantVersion := map[string]int{
		TypeCreated: 1, TypeLineAdded: 2, TypeLineRemoved: 1, TypePlaced: 1, TypePaid: 1, TypeCancelled: 1,
	}
	for _, p := range allEvents() {
		typ, version, data, err := Registry.Encode(p)
		if err != nil {
			t.Fatalf("Encode(%#v): %v", p, err)
		}
		if typ != p.EventType() || version != wantVersion[typ] {
			t.Errorf("Encode(%T) = %q v%d, want %q v%d", p, typ, version, p.EventType(), wantVersion[p.EventType()])
		}
		got, err := Registry.Decode(typ, version, data)
		if err != nil {
			t.Fatalf("Decode(%s): %v", data, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("round trip of %s:\n got %#v\nwant %#v", typ, got, p)
		}
		// A pointer encodes the same as its value.
		ptr := reflect.New(reflect.TypeOf(p))
		ptr.Elem().Set(reflect.ValueOf(p))
		_, _, pdata, err := Registry.Encode(ptr.Interface().(event.Payload))
		if err != nil || string(pdata) != string(data) {
			t.Errorf("Encode(&%T) = %s, %v; want %s", p, pdata, err, data)
		}
	}
}

// The stored JSON is a contract with existing data: field names must not
// change without an upcaster.
func TestStoredJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p    event.Payload
		want string
	}{
		{created(), `{"order_id":"ord-1","customer_id":"cust-1","currency":"EUR","at":"2026-03-01T09:00:00Z"}`},
		{added("p-1", 2, 150), `{"order_id":"ord-1","product_id":"p-1","quantity":2,"unit_price":{"amount":150,"currency":"EUR"},"at":"2026-03-01T09:01:00Z"}`},
		{removed("p-1"), `{"order_id":"ord-1","product_id":"p-1","at":"2026-03-01T09:02:00Z"}`},
		{placed(300), `{"order_id":"ord-1","total":{"amount":300,"currency":"EUR"},"at":"2026-03-01T09:03:00Z"}`},
		{paid("pay-1", 300), `{"order_id":"ord-1","payment_reference":"pay-1","amount":{"amount":300,"currency":"EUR"},"at":"2026-03-01T09:04:00Z"}`},
		{cancelled("why"), `{"order_id":"ord-1","reason":"why","at":"2026-03-01T09:04:00Z"}`},
		{cancelled(""), `{"order_id":"ord-1","at":"2026-03-01T09:04:00Z"}`},
	}
	for _, tc := range tests {
		_, _, data, err := Registry.Encode(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != tc.want {
			t.Errorf("%s JSON:\n got %s\nwant %s", tc.p.EventType(), data, tc.want)
		}
	}
}

func TestDecodeLineAddedV1Upcasts(t *testing.T) {
	t.Parallel()
	v1 := `{"order_id":"ord-1","product_id":"p-1","quantity":2,"unit_price_minor":150,"currency":"EUR","at":"2026-03-01T09:01:00Z"}`
	got, err := Registry.Decode(TypeLineAdded, 1, []byte(v1))
	if err != nil {
		t.Fatalf("Decode v1: %v", err)
	}
	if want := added("p-1", 2, 150); !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode v1:\n got %#v\nwant %#v", got, want)
	}

	// Edge values survive the upcast exactly.
	v1 = `{"order_id":"o","product_id":"p","quantity":1,"unit_price_minor":9223372036854775807,"currency":"JPY","at":"2026-03-01T09:01:00.123456789Z"}`
	got, err = Registry.Decode(TypeLineAdded, 1, []byte(v1))
	want := LineAdded{OrderID: "o", ProductID: "p", Quantity: 1, UnitPrice: money.Money{Amount: math.MaxInt64, Currency: "JPY"},
		At: time.Date(2026, 3, 1, 9, 1, 0, 123456789, time.UTC)}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode v1 at MaxInt64 = %#v, %v; want %#v", got, err, want)
	}

	// A v1 history loads into the same order as its v2 equivalent.
	stored := []struct {
		typ     string
		version int
		data    string
	}{
		{TypeCreated, 1, `{"order_id":"ord-1","customer_id":"cust-1","currency":"EUR","at":"2026-03-01T09:00:00Z"}`},
		{TypeLineAdded, 1, `{"order_id":"ord-1","product_id":"p-1","quantity":2,"unit_price_minor":150,"currency":"EUR","at":"2026-03-01T09:01:00Z"}`},
		{TypeLineAdded, 2, `{"order_id":"ord-1","product_id":"p-1","quantity":1,"unit_price":{"amount":150,"currency":"EUR"},"at":"2026-03-01T09:01:00Z"}`},
	}
	var history []event.Payload
	for _, s := range stored {
		p, err := Registry.DecodeRecord(event.Record{Type: s.typ, SchemaVersion: s.version, Data: json.RawMessage(s.data)})
		if err != nil {
			t.Fatalf("DecodeRecord(%s v%d): %v", s.typ, s.version, err)
		}
		history = append(history, p)
	}
	o, err := Load(history)
	if err != nil {
		t.Fatal(err)
	}
	if wantLines := []Line{{ProductID: "p-1", Quantity: 3, UnitPrice: eur(150)}}; !reflect.DeepEqual(o.Lines, wantLines) {
		t.Fatalf("lines = %+v, want %+v", o.Lines, wantLines)
	}
}

func TestDecodeLineAddedV1Malformed(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		``,
		`null`,
		`[]`,
		`"x"`,
		`{`,
		`{"order_id":"o","product_id":"p","quantity":1,"currency":"EUR","at":"2026-03-01T09:01:00Z"}`,     // no price
		`{"order_id":"o","product_id":"p","quantity":1,"unit_price_minor":1,"at":"2026-03-01T09:01:00Z"}`, // no currency
		`{"unit_price_minor":"150","currency":"EUR"}`,                                                     // price as string
		`{"unit_price_minor":1.5,"currency":"EUR"}`,                                                       // fractional price
		`{"unit_price_minor":1e400,"currency":"EUR"}`,                                                     // out of range
		`{"unit_price_minor":9223372036854775808,"currency":"EUR"}`,                                       // MaxInt64+1
		`{"unit_price_minor":1,"currency":3}`,                                                             // currency as number
		`{"unit_price_minor":1,"currency":"EUR","quantity":"two"}`,                                        // bad quantity
		`{"unit_price_minor":1,"currency":"EUR","at":"yesterday"}`,                                        // bad time
	} {
		if p, err := Registry.Decode(TypeLineAdded, 1, []byte(data)); err == nil {
			t.Errorf("Decode v1 %q = %#v, want an error", data, p)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	valid := []byte(`{"order_id":"ord-1"}`)
	for _, typ := range []string{"", "order.shipped", "Order.Created", "created", "order.created "} {
		if _, err := Registry.Decode(typ, 1, valid); !errors.Is(err, event.ErrUnknownType) {
			t.Errorf("Decode(%q) error = %v, want ErrUnknownType", typ, err)
		}
	}
	if _, _, _, err := Registry.Encode(otherEvent{}); !errors.Is(err, event.ErrUnknownType) {
		t.Errorf("Encode(foreign) error = %v, want ErrUnknownType", err)
	}
	versions := map[string][]int{
		TypeCreated:     {0, -1, 2, math.MaxInt},
		TypeLineAdded:   {0, -1, 3, math.MinInt},
		TypeLineRemoved: {0, 2},
		TypePlaced:      {0, 2},
		TypePaid:        {0, 2},
		TypeCancelled:   {0, 2},
	}
	for typ, vs := range versions {
		for _, v := range vs {
			if p, err := Registry.Decode(typ, v, valid); err == nil {
				t.Errorf("Decode(%s, v%d) = %#v, want an error", typ, v, p)
			}
		}
	}
}

// garbage is JSON (and non-JSON) that a damaged or hostile store might hold.
var garbage = []string{
	``, ` `, `{`, `}`, `[`, `null`, `true`, `0`, `-1`, `"x"`, `[]`, `{}`, `[{}]`,
	`{"order_id":1}`, `{"order_id":null}`, `{"at":"not a time"}`, `{"at":12}`,
	`{"quantity":"x"}`, `{"quantity":1e400}`, `{"quantity":9223372036854775808}`,
	`{"unit_price":"EUR 1"}`, `{"unit_price":{"amount":"1"}}`, `{"unit_price":[]}`,
	`{"total":{"amount":1.5}}`, `{"amount":{"amount":-9223372036854775809}}`,
	`{"unit_price_minor":{},"currency":[]}`, `{"unit_price_minor":1,"currency":"EUR","unit_price_minor":"x"}`,
	"\xff\xfe", "{\"order_id\":\"\xff\"}", strings.Repeat("[", 100000), strings.Repeat(`{"a":`, 10000),
}

func TestDecodeGarbageDoesNotPanic(t *testing.T) {
	t.Parallel()
	for _, typ := range Registry.Types() {
		for v := 0; v <= 3; v++ {
			for _, data := range garbage {
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("Decode(%s, v%d, %.40q) panicked: %v", typ, v, data, r)
						}
					}()
					p, err := Registry.Decode(typ, v, []byte(data))
					if err == nil && p == nil {
						t.Errorf("Decode(%s, v%d, %.40q) = nil, nil", typ, v, data)
					}
				}()
			}
		}
	}
}

// FuzzDecode checks that decoding never panics and that whatever decodes
// also encodes, applies to an order, and decodes back to itself. Under plain
// `go test` only the seeds run.
func FuzzDecode(f *testing.F) {
	for _, p := range allEvents() {
		typ, v, data, err := Registry.Encode(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(typ, v, data)
	}
	f.Add(TypeLineAdded, 1, []byte(`{"order_id":"o","product_id":"p","quantity":2,"unit_price_minor":150,"currency":"EUR","at":"2026-03-01T09:01:00Z"}`))
	for _, g := range garbage[:len(garbage)-2] {
		f.Add(TypeLineAdded, 1, []byte(g))
		f.Add(TypePaid, 1, []byte(g))
	}
	f.Fuzz(func(t *testing.T, typ string, version int, data []byte) {
		p, err := Registry.Decode(typ, version, data)
		if err != nil {
			return
		}
		if err := (&Order{}).Apply(p); err != nil {
			t.Fatalf("decoded %T does not apply: %v", p, err)
		}
		typ2, v2, data2, err := Registry.Encode(p)
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", p, err)
		}
		p2, err := Registry.Decode(typ2, v2, data2)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", data2, err)
		}
		// Times may lose their zone name in JSON; compare re-encodings.
		_, _, data3, err := Registry.Encode(p2)
		if err != nil || string(data3) != string(data2) {
			t.Fatalf("encoding is not stable: %s then %s (%v)", data2, data3, err)
		}
	})
}
