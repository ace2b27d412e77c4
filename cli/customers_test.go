package cli

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/strata-es/strata/internal/pgtest"
)

// TestCustomersUniqueEmail drives the customers module through a real
// `strata serve` (its answers checked against the OpenAPI document): an
// e-mail address held by one customer of a tenant, across customers'
// streams, with no saga and no unique index, by append conditions. Eight
// registrations of one address race: one is created, seven are refused.
func TestCustomersUniqueEmail(t *testing.T) {
	url := pgtest.NewDatabase(t)
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": url, "STRATA_DATA_DIR": t.TempDir(),
		"STRATA_JWT_SECRET": tenantsSecret, "STRATA_LOG_LEVEL": "warn"})
	defer stop()
	waitReady(t, base)
	call := func(tenant, path, body string) (int, string) {
		t.Helper()
		status, raw, _ := apiCall(t, nil, base, tenantToken(t, tenant), "POST", path, body)
		return status, string(raw)
	}
	want := func(status int, raw string, wantStatus int, code string) {
		t.Helper()
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal([]byte(raw), &body) //nolint:errcheck
		if status != wantStatus || body.Error.Code != code {
			t.Fatalf("answered %d %s, want %d %q", status, raw, wantStatus, code)
		}
	}

	const racers = 8
	statuses := make([]int, racers)
	raws := make([]string, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The domain's case differs: the rule compares it folded.
			email := "ann@EXAMPLE.com"
			if i%2 == 1 {
				email = "ann@example.com"
			}
			statuses[i], raws[i] = call("acme", fmt.Sprintf("/v1/customers/c-%d/register", i), `{"name":"Ann","email":"`+email+`"}`)
		}()
	}
	wg.Wait()
	winner := -1
	for i, s := range statuses {
		switch s {
		case 201:
			if winner >= 0 {
				t.Fatalf("customers c-%d and c-%d both registered ann@example.com", winner, i)
			}
			winner = i
		default:
			want(s, raws[i], 422, "rule_violation")
		}
	}
	if winner < 0 {
		t.Fatalf("no registration of ann@example.com succeeded: %v", raws)
	}
	holder := fmt.Sprintf("c-%d", winner)

	// Another tenant's customers are apart.
	s, raw := call("other", "/v1/customers/c-1/register", `{"name":"Ann","email":"ann@example.com"}`)
	want(s, raw, 201, "")
	// The holder moves to another address: the first is free again, the
	// second is taken.
	s, raw = call("acme", "/v1/customers/"+holder+"/email", `{"email":"ann@work.example"}`)
	want(s, raw, 200, "")
	s, raw = call("acme", "/v1/customers/c-new/register", `{"name":"Anna","email":"ann@example.com"}`)
	want(s, raw, 201, "")
	s, raw = call("acme", "/v1/customers/c-new/email", `{"email":"ann@work.example"}`)
	want(s, raw, 422, "rule_violation")
	// The same address again changes nothing; a customer that does not
	// exist, or a malformed address, is refused.
	s, raw = call("acme", "/v1/customers/"+holder+"/email", `{"email":"ann@work.example"}`)
	want(s, raw, 200, "")
	s, raw = call("acme", "/v1/customers/c-none/email", `{"email":"x@example.com"}`)
	want(s, raw, 404, "not_found")
	s, raw = call("acme", "/v1/customers/c-9/register", `{"name":"Bob","email":"Bob <bob@example.com>"}`)
	want(s, raw, 400, "invalid_request")
	s, raw = call("acme", "/v1/customers/"+holder+"/register", `{"name":"Ann","email":"ann2@example.com"}`)
	want(s, raw, 422, "rule_violation")
}
