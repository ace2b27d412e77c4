package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/internal/hydra"
	"github.com/strata-es/strata/internal/pgtest"
)

// call sends one request with a bearer token (apiCall) and returns the
// status and the body as text.
func call(t *testing.T, base, token, method, path, body string) (int, string) {
	t.Helper()
	status, raw, _ := apiCall(t, nil, base, token, method, path, body)
	return status, string(raw)
}

// wantUnauthenticated asserts today's single 401 answer.
func wantUnauthenticated(t *testing.T, what string, status int, body string) {
	t.Helper()
	if status != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthenticated"`) ||
		!strings.Contains(body, "the bearer token is invalid or expired") {
		t.Errorf("%s: %d %s, want the 401 every invalid token gets", what, status, body)
	}
}

// TestServeWithHydraTokens runs serve against Ory Hydra: clients obtain JWT
// access tokens by the client credentials grant and call the command,
// query, admin and platform routes (tenant from client_id, scopes from scp
// with the prefix strata:); a key rotation at Hydra is followed without a
// restart; a token of a key Hydra dropped is refused once strata fetches
// the keys again; tokens of another audience or issuer, and HS256 tokens,
// are refused.
func TestServeWithHydraTokens(t *testing.T) {
	hy := hydra.Start(t, pgtest.NewDatabase(t))
	acme := hydra.Client{ID: "acme", Secret: "acme-secret-0123456789", Scopes: []string{"strata:admin"}, Audience: []string{"strata", "other-api"}}
	beta := hydra.Client{ID: "beta", Secret: "beta-secret-0123456789", Audience: []string{"strata"}}
	ops := hydra.Client{ID: "ops", Secret: "ops-secret-0123456789", Scopes: []string{"strata:platform"}, Audience: []string{"strata"}}
	for _, c := range []hydra.Client{acme, beta, ops} {
		hy.CreateClient(t, c)
	}
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "warn",
		"STRATA_REQUIRE_TENANT_DIRECTORY": "false",
		"STRATA_OIDC_ISSUER":              hy.Issuer, "STRATA_OIDC_AUDIENCE": "strata", "STRATA_OIDC_TENANT_CLAIM": "client_id",
		"STRATA_OIDC_SCOPE_CLAIMS": "scp", "STRATA_OIDC_SCOPE_PREFIX": "strata:",
		"STRATA_OIDC_JWKS_REFRESH": "1s", "STRATA_OIDC_JWKS_MIN_REFRESH": "100ms"})
	defer func() {
		if code := stop(); code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	waitReady(t, base)

	admin := hy.Token(t, acme, []string{"strata:admin"}, "strata")
	status, body := call(t, base, admin, http.MethodPost, "/v1/orders", `{"customer_id":"c-1","currency":"EUR"}`)
	if status != http.StatusCreated {
		t.Fatalf("create order with Hydra's token: %d %s", status, body)
	}
	var created struct {
		ID string `json:"order_id"`
	}
	if err := json.Unmarshal([]byte(body), &created); err != nil || created.ID == "" {
		t.Fatalf("create order: %s", body)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, body = call(t, base, hy.Token(t, beta, nil, "strata"), http.MethodGet, "/v1/orders/"+created.ID, "")
		if status == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status != http.StatusNotFound && status != http.StatusOK {
		t.Fatalf("another tenant's query: %d %s", status, body)
	}
	if status == http.StatusOK {
		t.Fatalf("tenant beta read acme's order: %s", body)
	}
	for {
		status, body = call(t, base, admin, http.MethodGet, "/v1/orders/"+created.ID, "")
		if status == http.StatusOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status != http.StatusOK || !strings.Contains(body, created.ID) {
		t.Fatalf("query with Hydra's token: %d %s", status, body)
	}
	if status, body := call(t, base, admin, http.MethodGet, "/v1/admin/dead-letters", ""); status != http.StatusOK {
		t.Errorf("admin route, admin scope: %d %s", status, body)
	}
	if status, body := call(t, base, hy.Token(t, beta, nil, "strata"), http.MethodGet, "/v1/admin/dead-letters", ""); status != http.StatusForbidden {
		t.Errorf("admin route without the admin scope: %d %s", status, body)
	}
	platform := hy.Token(t, ops, []string{"strata:platform"}, "strata")
	if status, body := call(t, base, platform, http.MethodGet, "/v1/platform/tenants", ""); status != http.StatusOK {
		t.Errorf("platform route, platform scope: %d %s", status, body)
	}
	if status, body := call(t, base, admin, http.MethodGet, "/v1/platform/tenants", ""); status != http.StatusForbidden {
		t.Errorf("platform route with an admin token: %d %s", status, body)
	}

	status, body = call(t, base, hy.Token(t, acme, []string{"strata:admin"}, "other-api"), http.MethodGet, "/v1/admin/dead-letters", "")
	wantUnauthenticated(t, "a token for another audience", status, body)
	status, body = call(t, base, foreignToken(t, "http://127.0.0.1:1/"), http.MethodGet, "/v1/admin/dead-letters", "")
	wantUnauthenticated(t, "another issuer's token", status, body)
	hs, err := auth.Sign([]byte("a-development-secret-0123456789abcdef"), auth.Claims{Subject: "x", Tenant: "acme", Scopes: []string{"admin"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	status, body = call(t, base, hs, http.MethodGet, "/v1/admin/dead-letters", "")
	wantUnauthenticated(t, "an HS256 token while a provider is configured", status, body)

	// Rotation: Hydra signs with a new key from now on; strata has never
	// seen it, fetches, and accepts the token at once.
	before := hy.KeyIDs(t, hydra.AccessTokenKeys)
	hy.AddKey(t, hydra.AccessTokenKeys, "rotated-es256", "ES256")
	rotated := hy.Token(t, acme, []string{"strata:admin"}, "strata")
	if kid := tokenKid(t, rotated); kid != "rotated-es256" {
		t.Fatalf("Hydra signed with %q after the rotation", kid)
	}
	if status, body := call(t, base, rotated, http.MethodGet, "/v1/admin/dead-letters", ""); status != http.StatusOK {
		t.Fatalf("a token of the rotated key: %d %s", status, body)
	}
	if status, body := call(t, base, admin, http.MethodGet, "/v1/admin/dead-letters", ""); status != http.StatusOK {
		t.Fatalf("a token of the previous key, still published: %d %s", status, body)
	}
	// Retirement: Hydra drops the previous key; within the refresh period
	// (1s here) its tokens are refused, though strata verified and cached
	// this one before.
	for _, kid := range before {
		hy.DeleteKey(t, hydra.AccessTokenKeys, kid)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		status, body = call(t, base, admin, http.MethodGet, "/v1/admin/dead-letters", "")
		if status == http.StatusUnauthorized || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	wantUnauthenticated(t, "a token of the key Hydra dropped", status, body)
	if status, body := call(t, base, rotated, http.MethodGet, "/v1/admin/dead-letters", ""); status != http.StatusOK {
		t.Fatalf("the current key's token after the retirement: %d %s", status, body)
	}
}

func tokenKid(t *testing.T, token string) string {
	t.Helper()
	tok, _, err := jwt.NewParser().ParseUnverified(token, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	kid, _ := tok.Header["kid"].(string)
	return kid
}

// foreignToken is a well-formed ES256 token of issuer, signed by a key of
// its own.
func foreignToken(t *testing.T, issuer string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": issuer, "aud": "strata", "sub": "x", "client_id": "acme",
		"scp": []string{"strata:admin"}, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()})
	tok.Header["kid"] = "foreign"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jwksServer publishes one ES256 key; a test makes it slow or answer
// garbage.
type jwksServer struct {
	*httptest.Server
	key     *ecdsa.PrivateKey
	mu      sync.Mutex
	delay   time.Duration
	garbage bool
}

func newJWKSServer(t *testing.T) *jwksServer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s := &jwksServer{key: key}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		delay, garbage := s.delay, s.garbage
		s.mu.Unlock()
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		if garbage {
			_, _ = w.Write([]byte("<html>502 Bad Gateway</html>"))
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(delay time.Duration, garbage bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay, s.garbage = delay, garbage
}

func (s *jwksServer) token(t *testing.T, issuer, tenant, jti string) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": issuer, "aud": "strata", "sub": "user-1", "tenant": tenant,
		"scope": "admin", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "jti": jti})
	tok.Header["kid"] = "k1"
	str, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return str
}

// TestServeKeepsServingWhileTheProviderIsDown: when the provider's JWKS
// answers slowly, or with garbage, strata goes on verifying with the keys
// it fetched before, promptly, and /readyz stays ready but says so.
func TestServeKeepsServingWhileTheProviderIsDown(t *testing.T) {
	jwks := newJWKSServer(t)
	issuer := "http://127.0.0.1:1/issuer"
	base, _, stop := startServe(t, map[string]string{"DATABASE_URL": pgtest.NewDatabase(t), "STRATA_DATA_DIR": t.TempDir(), "STRATA_LOG_LEVEL": "error",
		"STRATA_REQUIRE_TENANT_DIRECTORY": "false",
		"STRATA_OIDC_ISSUER":              issuer, "STRATA_OIDC_JWKS_URL": jwks.URL, "STRATA_OIDC_AUDIENCE": "strata",
		"STRATA_OIDC_JWKS_REFRESH": "200ms", "STRATA_OIDC_JWKS_MIN_REFRESH": "100ms"})
	defer stop()
	waitReady(t, base)
	if status, body := call(t, base, jwks.token(t, issuer, "acme", "first"), http.MethodGet, "/v1/admin/dead-letters", ""); status != http.StatusOK {
		t.Fatalf("a provider's token: %d %s", status, body)
	}
	for _, mode := range []struct {
		name    string
		delay   time.Duration
		garbage bool
	}{{"slow", time.Minute, false}, {"garbage", 0, true}} {
		jwks.set(mode.delay, mode.garbage)
		var ready map[string]any
		deadline := time.Now().Add(20 * time.Second)
		for {
			res, err := http.Get(base + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Fatalf("%s: /readyz %d %s, want ready on the cached keys", mode.name, res.StatusCode, raw)
			}
			ready = nil
			_ = json.Unmarshal(raw, &ready)
			if bytes.Contains(raw, []byte("the last key fetch failed")) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if ws, _ := ready["warnings"].([]any); len(ws) == 0 {
			t.Fatalf("%s: /readyz does not say the keys are stale: %v", mode.name, ready)
		}
		start := time.Now()
		if status, body := call(t, base, jwks.token(t, issuer, "acme", mode.name), http.MethodGet, "/v1/admin/dead-letters", ""); status != http.StatusOK {
			t.Fatalf("%s: a token of the cached key: %d %s", mode.name, status, body)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: the request took %v", mode.name, d)
		}
	}
}

// TestServeRefusesTwoKindsOfToken: a process that verified both its own
// HS256 tokens and a provider's would let whoever holds the secret mint
// what the provider never issued.
func TestServeRefusesTwoKindsOfToken(t *testing.T) {
	for name, vars := range map[string]map[string]string{
		"both":        {"STRATA_JWT_SECRET": "serve-identity-secret-0123456789abcdef", "STRATA_OIDC_ISSUER": "https://idp.example.com/", "STRATA_OIDC_AUDIENCE": "strata"},
		"no audience": {"STRATA_OIDC_ISSUER": "https://idp.example.com/"},
		"no issuer":   {"STRATA_OIDC_AUDIENCE": "strata"},
		"http issuer": {"STRATA_OIDC_ISSUER": "http://idp.example.com/", "STRATA_OIDC_AUDIENCE": "strata"},
	} {
		t.Run(name, func(t *testing.T) {
			vars["DATABASE_URL"] = "postgres://127.0.0.1:1/none"
			vars["STRATA_DATA_DIR"] = t.TempDir()
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if code := run(ctx, []string{"serve", "--addr", "127.0.0.1:0"}, testEnv(vars), io.Discard, &stderr); code == exitOK {
				t.Fatal("serve started")
			}
			if !strings.Contains(stderr.String(), "STRATA_") {
				t.Errorf("the refusal does not name the setting: %s", stderr.String())
			}
			t.Log(strings.TrimSpace(stderr.String()))
		})
	}
}

func TestTokenRefusesWhenAProviderIssuesTokens(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"token", "--tenant", "acme"}, testEnv(map[string]string{"STRATA_OIDC_ISSUER": "https://idp.example.com/",
		"STRATA_DATA_DIR": t.TempDir()}), io.Discard, &stderr)
	if code == exitOK || !strings.Contains(stderr.String(), "identity provider") {
		t.Fatalf("strata token with a provider configured: exit %d, %s", code, stderr.String())
	}
}
