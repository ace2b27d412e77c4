package auth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-es/strata/auth"
	"github.com/strata-es/strata/domain"
)

// The tests run on a fixed clock, so that a token's fate never depends on
// when the test runs.
var (
	now         = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	secret      = []byte("0123456789abcdef0123456789abcdef")
	otherSecret = []byte("fedcba9876543210fedcba9876543210")
)

// leeway mirrors the verifier's clock-skew allowance.
const leeway = 30 * time.Second

func newVerifier(t testing.TB) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(secret, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func hs256(key []byte, signingInput string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signingInput))
	return b64(m.Sum(nil))
}

// craft builds a JWT from raw header and payload JSON, signed with key
// (unsigned when key is nil). It is written from RFC 7519 rather than with
// the JWT library, so that the tests do not share the parser's mistakes.
func craft(header, payload string, key []byte) string {
	in := b64([]byte(header)) + "." + b64([]byte(payload))
	if key == nil {
		return in + "."
	}
	return in + "." + hs256(key, in)
}

const hs256Header = `{"alg":"HS256","typ":"JWT"}`

func claimsJSON(exp time.Time, extra string) string {
	s := fmt.Sprintf(`{"sub":"user-1","tenant":"acme","exp":%d`, exp.Unix())
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func validToken() string { return craft(hs256Header, claimsJSON(now.Add(time.Hour), ""), secret) }

// checkParse asserts Parse's contract on token: it is quick, every
// rejection wraps ErrInvalidToken and returns no claims, and an accepted
// token is HS256-signed with the secret (checked independently), says alg
// HS256, has not expired and carries a valid tenant and subject.
func checkParse(t *testing.T, v *auth.Verifier, token string) (auth.Claims, bool) {
	t.Helper()
	var c auth.Claims
	var err error
	fastest := time.Hour
	for range 3 {
		start := time.Now()
		c, err = v.Parse(token)
		fastest = min(fastest, time.Since(start))
		if fastest <= 100*time.Millisecond {
			break
		}
	}
	if fastest > 100*time.Millisecond {
		t.Fatalf("Parse took %v", fastest)
	}
	if err != nil {
		if !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("Parse(%.100q) = %v, want ErrInvalidToken", token, err)
		}
		if c.Tenant != "" || c.Subject != "" || c.Scopes != nil || c.CrossTenant {
			t.Fatalf("Parse failed but returned claims %#v", c)
		}
		return c, false
	}

	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("accepted %q, which has %d parts", token, len(parts))
	}
	if !hmac.Equal([]byte(parts[2]), []byte(hs256(secret, parts[0]+"."+parts[1]))) {
		t.Fatalf("accepted %q, which is not HS256-signed with the secret", token)
	}
	headerJSON, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		t.Fatalf("accepted %q with a header that is not base64url: %v", token, err)
	}
	var header map[string]any
	if err := json.Unmarshal(headerJSON, &header); err != nil || header["alg"] != "HS256" {
		t.Fatalf("accepted %q with header %s (alg must be HS256): %v", token, headerJSON, err)
	}
	if _, ok := header["crit"]; ok {
		t.Fatalf("accepted %q with header %s: crit names extensions we do not understand", token, headerJSON)
	}
	payloadJSON, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("accepted %q with a payload that is not base64url: %v", token, err)
	}
	// The expiry as encoding/json reads it (which is how the JWT library
	// reads it too: case-insensitive keys, the last duplicate wins, a
	// numeric string counts as a number; see the report on issue 6).
	var payload struct {
		Exp   json.Number `json:"exp"`
		Iat   json.Number `json:"iat"`
		Scope string      `json:"scope"`
	}
	if err := json.Unmarshal(payloadJSON, &payload); err != nil {
		t.Fatalf("accepted %q with payload %s: %v", token, payloadJSON, err)
	}
	exp, err := payload.Exp.Float64()
	if err != nil || math.IsNaN(exp) || exp < float64(now.Add(-leeway).Unix()) {
		t.Fatalf("accepted %q with exp %q at %v: expired or missing", token, payload.Exp, now)
	}
	if c.ExpiresAt.Before(now.Add(-leeway)) || math.Abs(float64(c.ExpiresAt.Unix())-exp) > 1 {
		t.Fatalf("accepted claims expiring at %v; the token says %q", c.ExpiresAt, payload.Exp)
	}
	from := float64(now.Unix())
	if payload.Iat != "" {
		iat, err := payload.Iat.Float64()
		if err != nil || iat > float64(now.Add(leeway).Unix())+1 {
			t.Fatalf("accepted %q issued at %q, after %v", token, payload.Iat, now)
		}
		from = iat
	}
	if exp-from > auth.MaxLifetime.Seconds()+1 {
		t.Fatalf("accepted %q valid for %.0f s, more than MaxLifetime", token, exp-from)
	}
	var scopes []string
	for _, s := range strings.Split(payload.Scope, " ") {
		if s != "" {
			scopes = append(scopes, s)
		}
	}
	if strings.Join(c.Scopes, "\x00") != strings.Join(scopes, "\x00") || len(c.Scopes) != len(scopes) {
		t.Fatalf("accepted scope %q as %q; scopes are separated by U+0020 only", payload.Scope, c.Scopes)
	}
	if _, err := domain.ParseTenantID(string(c.Tenant)); err != nil {
		t.Fatalf("accepted tenant %q", c.Tenant)
	}
	if c.Subject == "" || len(c.Subject) > 256 {
		t.Fatalf("accepted subject %q", c.Subject)
	}
	return c, true
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	v := newVerifier(t)
	for _, tc := range []struct {
		name  string
		token string
		want  auth.Claims
	}{
		{"minimal", validToken(), auth.Claims{Subject: "user-1", Tenant: "acme", ExpiresAt: now.Add(time.Hour)}},
		{"expired within the leeway", craft(hs256Header, claimsJSON(now.Add(-leeway+time.Second), ""), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", ExpiresAt: now.Add(-leeway + time.Second)}},
		{"scopes and cross tenant", craft(hs256Header, claimsJSON(now.Add(time.Hour), `"scope":"admin  read","cross_tenant":true`), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", Scopes: []string{"admin", "read"}, CrossTenant: true, ExpiresAt: now.Add(time.Hour)}},
		{"no typ", craft(`{"alg":"HS256"}`, claimsJSON(now.Add(time.Hour), ""), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", ExpiresAt: now.Add(time.Hour)}},
		// Scopes are separated by U+0020 only: to the signer, "read\u00a0admin"
		// is one scope, and it is not admin.
		{"scope with a no-break space", craft(hs256Header, claimsJSON(now.Add(time.Hour), `"scope":"read\u00a0admin"`), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", Scopes: []string{"read\u00a0admin"}, ExpiresAt: now.Add(time.Hour)}},
		{"scope with a tab and an ideographic space", craft(hs256Header, claimsJSON(now.Add(time.Hour), `"scope":" read\tadmin write\u3000admin "`), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", Scopes: []string{"read\tadmin", "write\u3000admin"}, ExpiresAt: now.Add(time.Hour)}},
		{"lifetime MaxLifetime from iat", craft(hs256Header, claimsJSON(now.Add(auth.MaxLifetime-time.Hour), fmt.Sprintf(`"iat":%d`, now.Add(-time.Hour).Unix())), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", ExpiresAt: now.Add(auth.MaxLifetime - time.Hour)}},
		{"no iat, exp MaxLifetime from now", craft(hs256Header, claimsJSON(now.Add(auth.MaxLifetime), ""), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", ExpiresAt: now.Add(auth.MaxLifetime)}},
		{"iat in the future within the leeway", craft(hs256Header, claimsJSON(now.Add(time.Hour), fmt.Sprintf(`"iat":%d`, now.Add(leeway-time.Second).Unix())), secret),
			auth.Claims{Subject: "user-1", Tenant: "acme", ExpiresAt: now.Add(time.Hour)}},
	} {
		c, ok := checkParse(t, v, tc.token)
		if !ok {
			t.Errorf("%s: rejected", tc.name)
			continue
		}
		if c.Subject != tc.want.Subject || c.Tenant != tc.want.Tenant || !c.ExpiresAt.Equal(tc.want.ExpiresAt) ||
			strings.Join(c.Scopes, " ") != strings.Join(tc.want.Scopes, " ") || c.CrossTenant != tc.want.CrossTenant {
			t.Errorf("%s: claims %#v, want %#v", tc.name, c, tc.want)
		}
	}
	if c, ok := checkParse(t, v, validToken()); !ok || !c.HasScope("") == c.HasScope("admin") {
		t.Errorf("HasScope on a token without scopes")
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	v := newVerifier(t)
	exp := now.Add(time.Hour)
	valid := validToken()
	parts := strings.Split(valid, ".")
	for _, tc := range []struct{ name, token string }{
		{"empty", ""},
		{"garbage", "not a token"},
		{"two parts", parts[0] + "." + parts[1]},
		{"four parts", valid + "." + parts[2]},
		{"oversized", craft(hs256Header, claimsJSON(exp, `"pad":"`+strings.Repeat("x", 4096)+`"`), secret)},
		{"wrong secret", craft(hs256Header, claimsJSON(exp, ""), otherSecret)},
		{"tampered payload", parts[0] + "." + b64([]byte(claimsJSON(exp, `"scope":"admin"`))) + "." + parts[2]},
		{"signature of another token", parts[0] + "." + parts[1] + "." + hs256(secret, "x.y")},
		{"empty signature", parts[0] + "." + parts[1] + "."},
		{"padded signature", valid + "="},
		{"line break in the signature", parts[0] + "." + parts[1] + "." + parts[2][:8] + "\n" + parts[2][8:]},
		{"carriage return in the claims", parts[0] + "." + parts[1][:4] + "\r" + parts[1][4:] + "." + parts[2]},
		{"trailing line break", valid + "\n"},
		{"space in the header", parts[0][:3] + " " + parts[0][3:] + "." + parts[1] + "." + parts[2]},
		{"standard base64 signature", parts[0] + "." + parts[1] + "." + base64.StdEncoding.EncodeToString([]byte(parts[2]))},
		{"alg none unsigned", craft(`{"alg":"none","typ":"JWT"}`, claimsJSON(exp, ""), nil)},
		{"alg none with a valid HS256 signature", craft(`{"alg":"none"}`, claimsJSON(exp, ""), secret)},
		{"alg None", craft(`{"alg":"None"}`, claimsJSON(exp, ""), nil)},
		{"alg hs256 lower case", craft(`{"alg":"hs256"}`, claimsJSON(exp, ""), secret)},
		{"alg HS384", craft(`{"alg":"HS384"}`, claimsJSON(exp, ""), secret)},
		{"alg RS256 (key confusion)", craft(`{"alg":"RS256"}`, claimsJSON(exp, ""), secret)},
		{"alg missing", craft(`{"typ":"JWT"}`, claimsJSON(exp, ""), secret)},
		{"alg not a string", craft(`{"alg":1}`, claimsJSON(exp, ""), secret)},
		{"header not JSON", craft(`{"alg":"HS256"`, claimsJSON(exp, ""), secret)},
		{"payload not JSON", craft(hs256Header, `{"sub":`, secret)},
		{"payload an array", craft(hs256Header, `[]`, secret)},
		{"expired", craft(hs256Header, claimsJSON(now.Add(-leeway-time.Second), ""), secret)},
		{"long expired", craft(hs256Header, claimsJSON(time.Unix(0, 0), ""), secret)},
		{"no exp", craft(hs256Header, `{"sub":"user-1","tenant":"acme"}`, secret)},
		{"expired, as a string", craft(hs256Header, `{"sub":"user-1","tenant":"acme","exp":"`+strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)+`"}`, secret)},
		{"exp huge", craft(hs256Header, `{"sub":"user-1","tenant":"acme","exp":1e400}`, secret)},
		{"not yet valid", craft(hs256Header, claimsJSON(exp, fmt.Sprintf(`"nbf":%d`, now.Add(time.Hour).Unix())), secret)},
		{"no tenant", craft(hs256Header, fmt.Sprintf(`{"sub":"user-1","exp":%d}`, exp.Unix()), secret)},
		{"tenant upper case", craft(hs256Header, fmt.Sprintf(`{"sub":"user-1","tenant":"ACME","exp":%d}`, exp.Unix()), secret)},
		{"tenant with a path", craft(hs256Header, fmt.Sprintf(`{"sub":"user-1","tenant":"acme/../b","exp":%d}`, exp.Unix()), secret)},
		{"tenant a number", craft(hs256Header, fmt.Sprintf(`{"sub":"user-1","tenant":1,"exp":%d}`, exp.Unix()), secret)},
		{"no subject", craft(hs256Header, fmt.Sprintf(`{"tenant":"acme","exp":%d}`, exp.Unix()), secret)},
		{"subject too long", craft(hs256Header, fmt.Sprintf(`{"sub":"%s","tenant":"acme","exp":%d}`, strings.Repeat("u", 257), exp.Unix()), secret)},
		{"exp 10^18", craft(hs256Header, `{"sub":"user-1","tenant":"acme","exp":1000000000000000000}`, secret)},
		{"no iat, exp beyond MaxLifetime from now", craft(hs256Header, claimsJSON(now.Add(auth.MaxLifetime+time.Minute), ""), secret)},
		{"exp beyond MaxLifetime from iat", craft(hs256Header, claimsJSON(exp, fmt.Sprintf(`"iat":%d`, exp.Add(-auth.MaxLifetime-time.Minute).Unix())), secret)},
		{"iat in the future", craft(hs256Header, claimsJSON(exp, fmt.Sprintf(`"iat":%d`, now.Add(leeway+time.Second).Unix())), secret)},
		{"iat far in the future, exp after it", craft(hs256Header, claimsJSON(now.Add(2*time.Hour), fmt.Sprintf(`"iat":%d`, now.Add(time.Hour).Unix())), secret)},
		{"crit in the header", craft(`{"alg":"HS256","crit":["exp"]}`, claimsJSON(exp, ""), secret)},
		{"empty crit in the header", craft(`{"alg":"HS256","crit":[]}`, claimsJSON(exp, ""), secret)},
		{"crit null in the header", craft(`{"alg":"HS256","typ":"JWT","crit":null}`, claimsJSON(exp, ""), secret)},
	} {
		if c, ok := checkParse(t, v, tc.token); ok {
			t.Errorf("%s: accepted as %#v", tc.name, c)
		}
	}
}

func TestSignParseRoundTrip(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(secret, nil) // Sign stamps the real clock
	if err != nil {
		t.Fatal(err)
	}
	in := auth.Claims{Subject: "user-1", Tenant: "acme", Scopes: []string{auth.ScopeAdmin}, CrossTenant: true}
	tok, err := auth.Sign(secret, in, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Parse(tok)
	if err != nil || c.Subject != in.Subject || c.Tenant != in.Tenant || !c.HasScope(auth.ScopeAdmin) || !c.CrossTenant {
		t.Fatalf("Parse(Sign(%#v)) = %#v, %v", in, c, err)
	}
	if _, err := (mustVerifier(t, otherSecret)).Parse(tok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("a token verified under another secret: %v", err)
	}
	expired, err := auth.Sign(secret, in, -time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Parse(expired); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("an expired token verified: %v", err)
	}
}

func mustVerifier(t *testing.T, s []byte) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSignAndNewVerifierRefuse(t *testing.T) {
	t.Parallel()
	short := secret[:auth.MinSecretLen-1]
	if _, err := auth.NewVerifier(short, nil); err == nil {
		t.Error("NewVerifier accepted a short secret")
	}
	for _, tc := range []struct {
		name   string
		secret []byte
		c      auth.Claims
	}{
		{"short secret", short, auth.Claims{Subject: "u", Tenant: "acme"}},
		{"bad tenant", secret, auth.Claims{Subject: "u", Tenant: "Acme"}},
		{"no tenant", secret, auth.Claims{Subject: "u"}},
		{"no subject", secret, auth.Claims{Tenant: "acme"}},
	} {
		if tok, err := auth.Sign(tc.secret, tc.c, time.Hour); err == nil {
			t.Errorf("Sign %s: issued %q", tc.name, tok)
		}
	}
	if tok, err := auth.Sign(secret, auth.Claims{Subject: "u", Tenant: "acme"}, auth.MaxLifetime+time.Second); err == nil {
		t.Errorf("Sign issued %q for longer than MaxLifetime", tok)
	}
	if _, err := auth.Sign(secret, auth.Claims{Subject: "u", Tenant: "acme"}, auth.MaxLifetime); err != nil {
		t.Errorf("Sign refused MaxLifetime: %v", err)
	}
}

// Claims are read strictly: a signed token must not smuggle a second
// tenant through a case variant or a duplicate key.
func TestParseRejectsAmbiguousClaims(t *testing.T) {
	secret := []byte("strict-claims-secret-strict-claims-0123")
	v, err := auth.NewVerifier(secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An expiry within MaxLifetime, so that only the ambiguity can refuse
	// these.
	exp := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	for _, payload := range []string{
		`{"sub":"u","tenant":"acme","exp":` + exp + `,"Tenant":"other"}`,
		`{"sub":"u","tenant":"acme","exp":1,"EXP":` + exp + `}`,
		`{"sub":"u","tenant":"acme","tenant":"other","exp":` + exp + `}`,
		`{"sub":"u","tenant":"acme","exp":"` + exp + `"}`,
	} {
		tok := signRaw(t, secret, payload)
		if c, err := v.Parse(tok); err == nil {
			t.Errorf("accepted %s as tenant %q", payload, c.Tenant)
		}
	}
	if _, err := v.Parse(signRaw(t, secret, `{"sub":"u","tenant":"acme","exp":`+exp+`}`)); err != nil {
		t.Fatalf("a plain token was refused: %v", err)
	}
}

func signRaw(t *testing.T, secret []byte, payload string) string {
	t.Helper()
	head := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := base64.RawURLEncoding.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(head + "." + body))
	return head + "." + body + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// A verified token is remembered, but never past its expiry.
func TestCachedTokenExpires(t *testing.T) {
	secret := []byte("cache-secret-cache-secret-cache-secret-01")
	now := time.Now()
	v, err := auth.NewVerifier(secret, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	tok, err := auth.Sign(secret, auth.Claims{Subject: "s", Tenant: "t-a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second parse comes from the cache
		if c, err := v.Parse(tok); err != nil || c.Tenant != "t-a" {
			t.Fatalf("parse %d: %v %v", i, c, err)
		}
	}
	now = now.Add(2 * time.Minute)
	if _, err := v.Parse(tok); err == nil {
		t.Fatal("an expired token was accepted from the cache")
	}
	// A tampered token is not a cache hit.
	if _, err := v.Parse(tok[:len(tok)-2] + "xx"); err == nil {
		t.Fatal("a tampered token was accepted")
	}
}
