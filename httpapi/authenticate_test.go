package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/httpapi"
)

// Authenticate takes the tenant from exactly one bearer token: a request
// with two Authorization headers is refused, whichever of them is valid.
func TestAuthenticateHeaders(t *testing.T) {
	t.Parallel()
	secret := []byte("authenticate-test-secret-0123456789abcdef")
	v, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(tenant string) string {
		tok, err := auth.Sign(secret, auth.Claims{Subject: "u", Tenant: domain.TenantID("t-" + tenant)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	a, b := sign("a"), sign("b")
	srv := httptest.NewServer(httpapi.Authenticate(v)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := httpapi.ClaimsFrom(r.Context())
		httpapi.WriteJSON(w, http.StatusOK, map[string]string{"tenant": string(c.Tenant)})
	})))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		headers []string
		status  int
		code    string
	}{
		{"one", []string{a}, 200, ""},
		{"none", nil, 401, "unauthenticated"},
		{"two tenants", []string{a, b}, 400, "invalid_request"},
		{"the same twice", []string{a, a}, 400, "invalid_request"},
		{"a valid one after an empty one", []string{"", a}, 400, "invalid_request"},
		{"two in one header", []string{a + ", " + b}, 401, "unauthenticated"},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Authorization"] = tc.headers
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var shape struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(raw, &shape)
		if res.StatusCode != tc.status || shape.Error.Code != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, res.StatusCode, raw, tc.status, tc.code)
		}
	}
}
