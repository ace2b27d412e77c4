package customer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/examples/customers/customer"
)

func TestNormalizeEmail(t *testing.T) {
	for in, want := range map[string]string{
		"ann@Example.COM":  "ann@example.com",
		"Ann@example.com":  "Ann@example.com",
		"a.b+c@mail.co.uk": "a.b+c@mail.co.uk",
	} {
		if got, err := customer.NormalizeEmail(in); err != nil || got != want {
			t.Errorf("NormalizeEmail(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ann", "ann@", "@example.com", "ann@example", "Ann <ann@example.com>", "ann @example.com", "a@b@example.com"} {
		if _, err := customer.NormalizeEmail(in); !errors.Is(err, customer.ErrEmail) {
			t.Errorf("NormalizeEmail(%q): %v, want ErrEmail", in, err)
		}
	}
}

// TestHolder follows an address through the events about it: taken, given
// up, taken by another; a forgotten customer's events (their fields read
// as tombstones) hold nothing.
func TestHolder(t *testing.T) {
	const a = "ann@example.com"
	for name, tc := range map[string]struct {
		events []event.Payload
		want   string
	}{
		"none":               {nil, ""},
		"registered":         {[]event.Payload{customer.Registered{Customer: "c-1", Email: a}}, "c-1"},
		"moved away":         {[]event.Payload{customer.Registered{Customer: "c-1", Email: a}, customer.EmailChanged{Customer: "c-1", From: a, To: "x@example.com"}}, ""},
		"taken by another":   {[]event.Payload{customer.Registered{Customer: "c-1", Email: a}, customer.EmailChanged{Customer: "c-1", From: a, To: "x@example.com"}, customer.EmailChanged{Customer: "c-2", From: "y@example.com", To: a}}, "c-2"},
		"another moves away": {[]event.Payload{customer.Registered{Customer: "c-1", Email: a}, customer.EmailChanged{Customer: "c-2", From: a, To: "y@example.com"}}, "c-1"},
		"forgotten":          {[]event.Payload{customer.Registered{Customer: customer.Erased, Email: customer.Erased}}, ""},
	} {
		if got := customer.Holder(a, tc.events); got != tc.want {
			t.Errorf("%s: holder %q, want %q", name, got, tc.want)
		}
	}
}

func TestTagsAreDigests(t *testing.T) {
	r := event.NewRegistry(customer.Codecs()...)
	tags, err := r.Tags(customer.EmailChanged{Customer: "c-1", From: "b@example.com", To: "a@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) != 2 || tags[0] == tags[1] {
		t.Fatalf("tags %v, want two", tags)
	}
	for _, tag := range tags {
		if tag != customer.EmailTag("a@example.com") && tag != customer.EmailTag("b@example.com") {
			t.Fatalf("tag %q is neither address's", tag)
		}
		for _, addr := range []string{"a@example.com", "b@example.com", "example.com"} {
			if strings.Contains(tag, addr) {
				t.Fatalf("tag %q shows %s", tag, addr)
			}
		}
	}
}
