package esdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/strata-es/strata/eventstore"
)

func TestTranslateCode(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code    esdb.ErrorCode
		want    error // nil: no sentinel
		trouble bool  // the connection must be probed before the next call
	}{
		{esdb.ErrorCodeWrongExpectedVersion, eventstore.ErrVersionConflict, false},
		{esdb.ErrorUnavailable, eventstore.ErrUnavailable, true},
		{esdb.ErrorCodeDeadlineExceeded, eventstore.ErrUnavailable, true},
		{esdb.ErrorCodeNotLeader, eventstore.ErrUnavailable, true},
		{esdb.ErrorCodeConnectionClosed, eventstore.ErrUnavailable, true},
		{esdb.ErrorAborted, eventstore.ErrUnavailable, true},
		{esdb.ErrorCodeUnauthenticated, ErrAccessDenied, false},
		{esdb.ErrorCodeAccessDenied, ErrAccessDenied, false},
		{esdb.ErrorCodeResourceNotFound, errNotFound, false},
		{esdb.ErrorCodeStreamDeleted, ErrStreamDeleted, false},
		{esdb.ErrorCodeUnknown, nil, false},
		{esdb.ErrorCodeUnsupportedFeature, nil, false},
		{esdb.ErrorCodeResourceAlreadyExists, nil, false},
		{esdb.ErrorCodeParsing, nil, false},
		{esdb.ErrorCodeInternalClient, nil, false},
		{esdb.ErrorCodeInternalServer, nil, false},
	}
	sentinels := []error{eventstore.ErrVersionConflict, eventstore.ErrUnavailable, eventstore.ErrNoTenant,
		eventstore.ErrIdempotencyKeyExists, ErrAccessDenied, errNotFound, ErrStreamDeleted}
	for _, c := range cases {
		err := translateCode("append t/s", c.code, "detail")
		if !strings.HasPrefix(err.Error(), "append t/s: ") || !strings.HasSuffix(err.Error(), "detail") {
			t.Errorf("code %d: message %q", c.code, err)
		}
		for _, s := range sentinels {
			if errors.Is(err, s) != (s == c.want) {
				t.Errorf("code %d: errors.Is(%v) = %v", c.code, s, !(s == c.want))
			}
		}
		if got := connectionTrouble(c.code); got != c.trouble {
			t.Errorf("code %d: connectionTrouble = %v", c.code, got)
		}
	}
}

// TestCodeOfFindsWrappedErrors documents why the adapter does not use
// esdb.FromError: the client wraps its own errors ("could not construct
// append operation. Reason: %w"), FromError's type assertion then loses
// the code, and its ok result is true only for a nil error.
func TestCodeOfFindsWrappedErrors(t *testing.T) {
	t.Parallel()
	inner, _ := esdb.FromError(errors.New("boom")) // the only way to build an *esdb.Error outside the client
	wrapped := fmt.Errorf("could not construct append operation. Reason: %w", inner)

	if e, ok := esdb.FromError(nil); e != nil || !ok {
		t.Fatalf("FromError(nil) = %v, %v; the reversed ok changed", e, ok)
	}
	if e, ok := esdb.FromError(wrapped); ok || e.Err() != wrapped {
		t.Fatalf("FromError(wrapped) = %v, %v; expected a new Unknown error around the wrapper", e, ok)
	}
	if code, ok := codeOf(wrapped); !ok || code != esdb.ErrorCodeUnknown {
		t.Fatalf("codeOf(wrapped) = %v, %v", code, ok)
	}
	if _, ok := codeOf(errors.New("plain")); ok {
		t.Fatal("codeOf found a client error in a plain error")
	}
	var r redactor
	if err := r.translate("op", wrapped); errors.As(err, new(*esdb.Error)) {
		t.Fatalf("translate leaks the client's error type: %#v", err)
	}
}

func TestTranslateContextAndPlainErrors(t *testing.T) {
	t.Parallel()
	r := redactor{secrets: []string{"hunter22"}}
	if err := r.translate("op", nil); err != nil {
		t.Fatalf("translate(nil) = %v", err)
	}
	if err := r.translate("op", context.DeadlineExceeded); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	if err := r.translate("op", fmt.Errorf("x: %w", context.Canceled)); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	if err := r.translate("op", ErrClosed); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	err := r.translate("op", errors.New("dial esdb://admin:hunter22@db:2113 failed (password hunter22)"))
	if strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "admin") {
		t.Fatalf("translate leaks credentials: %v", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	r := redactor{secrets: []string{"pa:ss@w0rd"}}
	for in, want := range map[string]string{
		"connect esdb://admin:changeit@db:2113?tls=false": "connect esdb://xxxxx@db:2113?tls=false",
		"esdb+discover://u:p@cluster:2113":                "esdb+discover://xxxxx@cluster:2113",
		"no url here":                                     "no url here",
		"secret pa:ss@w0rd inline":                        "secret xxxxx inline",
		`"esdb://x@y"`:                                    `"esdb://xxxxx@y"`,
	} {
		if got := r.redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"esdb://admin:changeit@db:2113?tls=false":        "esdb://xxxxx@db:2113?tls=false",
		"esdb://db1:2113,db2:2113?tls=false":             "esdb://db1:2113,db2:2113?tls=false",
		"esdb+discover://admin@cluster.example.com:2113": "esdb+discover://xxxxx@cluster.example.com:2113",
		"\x7fesdb://admin:changeit@db":                   "(unparsable connection string)",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
