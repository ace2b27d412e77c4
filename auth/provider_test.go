package auth_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/strata-es/strata/auth"
)

// provider is an identity provider for the tests: it publishes a JWK set
// (which a test may change, slow down or break) and a discovery document.
// Tokens are signed here with the standard library's primitives from RFC
// 7515's definitions, not with the JWT library strata parses with.
type provider struct {
	srv     *httptest.Server
	issuer  string
	mu      sync.Mutex
	keys    []jose.JSONWebKey // published
	private map[string]crypto.Signer
	delay   time.Duration // before answering the key set
	garbage bool          // answer the key set with garbage
	hits    atomic.Int64  // key set requests
}

func newProvider(t testing.TB) *provider {
	t.Helper()
	p := &provider{private: map[string]crypto.Signer{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.issuer, "jwks_uri": p.srv.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		delay, garbage := p.delay, p.garbage
		set := jose.JSONWebKeySet{Keys: append([]jose.JSONWebKey(nil), p.keys...)}
		p.mu.Unlock()
		p.hits.Add(1) // after the snapshot: a test that sees the hit knows what this answer holds
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		if garbage {
			_, _ = w.Write([]byte(`{"keys": "not a list"`))
			return
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	p.issuer = p.srv.URL + "/"
	return p
}

// addKey makes a key of kind (rsa, ec, ed25519), publishes it under kid
// with alg (may be empty) and keeps its private half for signing.
func (p *provider) addKey(t testing.TB, kid, kind, alg string) {
	t.Helper()
	var priv crypto.Signer
	var err error
	switch kind {
	case "rsa":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ec":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ed25519":
		_, priv, err = ed25519.GenerateKey(rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.private[kid] = priv
	p.keys = append(p.keys, jose.JSONWebKey{Key: priv.Public(), KeyID: kid, Algorithm: alg, Use: "sig"})
}

// dropKey stops publishing kid (the provider retired it).
func (p *provider) dropKey(kid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, k := range p.keys {
		if k.KeyID == kid {
			p.keys = append(p.keys[:i], p.keys[i+1:]...)
			return
		}
	}
}

func (p *provider) set(delay time.Duration, garbage bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay, p.garbage = delay, garbage
}

// sign signs header and payload (raw JSON) with kid's private key by alg.
func (p *provider) sign(t testing.TB, kid, header, payload string) string {
	t.Helper()
	p.mu.Lock()
	priv := p.private[kid]
	p.mu.Unlock()
	var h struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal([]byte(header), &h); err != nil {
		t.Fatal(err)
	}
	in := b64([]byte(header)) + "." + b64([]byte(payload))
	digest := sha256.Sum256([]byte(in))
	var sig []byte
	var err error
	switch h.Alg {
	case "RS256":
		sig, err = rsa.SignPKCS1v15(rand.Reader, priv.(*rsa.PrivateKey), crypto.SHA256, digest[:])
	case "PS256":
		sig, err = rsa.SignPSS(rand.Reader, priv.(*rsa.PrivateKey), crypto.SHA256, digest[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
	case "ES256":
		var r, s *big.Int
		r, s, err = ecdsa.Sign(rand.Reader, priv.(*ecdsa.PrivateKey), digest[:])
		if err == nil {
			sig = make([]byte, 64)
			r.FillBytes(sig[:32])
			s.FillBytes(sig[32:])
		}
	case "EdDSA":
		sig = ed25519.Sign(priv.(ed25519.PrivateKey), []byte(in))
	case "HS256":
		// Algorithm confusion: the HMAC key is the public key's JSON.
		pub, _ := json.Marshal(jose.JSONWebKey{Key: priv.Public()})
		return in + "." + hs256(pub, in)
	default:
		t.Fatalf("sign: alg %s", h.Alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + b64(sig)
}

const audience = "strata-api"

func (p *provider) claims(exp time.Time, extra string) string {
	s := fmt.Sprintf(`{"iss":%q,"aud":[%q],"sub":"client-1","client_id":"acme","iat":%d,"exp":%d`,
		p.issuer, audience, now.Add(-time.Minute).Unix(), exp.Unix())
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func header(alg, kid string) string { return fmt.Sprintf(`{"alg":%q,"kid":%q,"typ":"JWT"}`, alg, kid) }

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newProviderVerifier verifies p's tokens: tenant from client_id, scopes
// from scp with the prefix "strata:".
func newProviderVerifier(t testing.TB, p *provider, clk *clock, ks auth.KeySetConfig) (*auth.ProviderVerifier, *auth.KeySet) {
	t.Helper()
	ks.Issuer, ks.Now = p.issuer, clk.now
	keys, err := auth.NewKeySet(ks)
	if err != nil {
		t.Fatal(err)
	}
	v, err := auth.NewProviderVerifier(auth.ProviderConfig{Issuer: p.issuer, Audience: audience, TenantClaim: "client_id",
		ScopeClaims: []string{"scp"}, ScopePrefix: "strata:", Keys: keys, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return v, keys
}

func TestProviderTokensOfEachKeyTypeVerify(t *testing.T) {
	p := newProvider(t)
	p.addKey(t, "rsa-1", "rsa", "RS256")
	p.addKey(t, "rsa-pss", "rsa", "PS256")
	p.addKey(t, "ec-1", "ec", "ES256")
	p.addKey(t, "ed-1", "ed25519", "")
	v, _ := newProviderVerifier(t, p, &clock{t: now}, auth.KeySetConfig{})
	payload := p.claims(now.Add(time.Hour), `"scp":["strata:admin","strata:cross_tenant","openid","other:admin"]`)
	for _, c := range []struct{ alg, kid string }{{"RS256", "rsa-1"}, {"PS256", "rsa-pss"}, {"ES256", "ec-1"}, {"EdDSA", "ed-1"}} {
		got, err := v.Parse(p.sign(t, c.kid, header(c.alg, c.kid), payload))
		if err != nil {
			t.Fatalf("%s: %v", c.alg, err)
		}
		if got.Tenant != "acme" || got.Subject != "client-1" || !got.CrossTenant ||
			strings.Join(got.Scopes, " ") != "admin" || !got.ExpiresAt.Equal(now.Add(time.Hour).Truncate(time.Second)) {
			t.Fatalf("%s: claims %+v", c.alg, got)
		}
	}
}

// TestAuthProviderRefuses holds every refusal of a provider's token; each
// fails with ErrInvalidToken and no claims, quickly.
func TestAuthProviderRefuses(t *testing.T) {
	p := newProvider(t)
	p.addKey(t, "rsa-1", "rsa", "RS256")
	p.addKey(t, "ec-1", "ec", "ES256")
	p.addKey(t, "ed-1", "ed25519", "")
	v, _ := newProviderVerifier(t, p, &clock{t: now}, auth.KeySetConfig{})
	good := p.claims(now.Add(time.Hour), "")
	if _, err := v.Parse(p.sign(t, "rsa-1", header("RS256", "rsa-1"), good)); err != nil {
		t.Fatalf("the control token: %v", err)
	}
	other := newProvider(t)
	other.addKey(t, "rsa-1", "rsa", "RS256") // same kid, another key
	cases := map[string]string{
		"alg none":                             b64([]byte(`{"alg":"none","kid":"rsa-1"}`)) + "." + b64([]byte(good)) + ".",
		"HS256 keyed with the public key":      p.sign(t, "rsa-1", header("HS256", "rsa-1"), good),
		"signed by another key, same kid":      other.sign(t, "rsa-1", header("RS256", "rsa-1"), good),
		"RS256 token, ES256 key":               p.sign(t, "rsa-1", header("RS256", "ec-1"), good),
		"ES256 token, RS256 key":               p.sign(t, "ec-1", header("ES256", "rsa-1"), good),
		"PS256 token, key published for RS256": p.sign(t, "rsa-1", header("PS256", "rsa-1"), good),
		"EdDSA token, RSA key":                 p.sign(t, "ed-1", header("EdDSA", "rsa-1"), good),
		"unknown kid":                          p.sign(t, "rsa-1", header("RS256", "nope"), good),
		"no kid":                               p.sign(t, "rsa-1", `{"alg":"RS256"}`, good),
		"another issuer": p.sign(t, "rsa-1", header("RS256", "rsa-1"),
			strings.Replace(good, p.issuer, "https://evil.example/", 1)),
		"another audience": p.sign(t, "rsa-1", header("RS256", "rsa-1"), strings.Replace(good, audience, "other-api", 1)),
		"no audience": p.sign(t, "rsa-1", header("RS256", "rsa-1"),
			fmt.Sprintf(`{"iss":%q,"sub":"c","client_id":"acme","exp":%d}`, p.issuer, now.Add(time.Hour).Unix())),
		"expired":       p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(-leeway-time.Second), "")),
		"not yet valid": p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(time.Hour), fmt.Sprintf(`"nbf":%d`, now.Add(time.Hour).Unix()))),
		"no exp": p.sign(t, "rsa-1", header("RS256", "rsa-1"),
			fmt.Sprintf(`{"iss":%q,"aud":%q,"sub":"c","client_id":"acme"}`, p.issuer, audience)),
		"valid too long": p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(auth.MaxLifetime+time.Hour), "")),
		"no tenant": p.sign(t, "rsa-1", header("RS256", "rsa-1"),
			strings.Replace(good, `"client_id":"acme"`, `"azp":"acme"`, 1)),
		"malformed tenant":       p.sign(t, "rsa-1", header("RS256", "rsa-1"), strings.Replace(good, `"acme"`, `"a b"`, 1)),
		"no subject":             p.sign(t, "rsa-1", header("RS256", "rsa-1"), strings.Replace(good, `"sub":"client-1",`, "", 1)),
		"scope of numbers":       p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(time.Hour), `"scp":[1]`)),
		"scope object":           p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(time.Hour), `"scp":{"a":1}`)),
		"duplicate tenant":       p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(time.Hour), `"client_id":"evil"`)),
		"tenant in another case": p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(time.Hour), `"Client_ID":"evil"`)),
		"crit header":            p.sign(t, "rsa-1", `{"alg":"RS256","kid":"rsa-1","crit":["exp"],"exp":1}`, good),
	}
	cases["issued in future"] = p.sign(t, "rsa-1", header("RS256", "rsa-1"),
		strings.Replace(good, fmt.Sprintf(`"iat":%d`, now.Add(-time.Minute).Unix()), fmt.Sprintf(`"iat":%d`, now.Add(time.Hour).Unix()), 1))
	tok := p.sign(t, "rsa-1", header("RS256", "rsa-1"), good)
	cases["signature of another token"] = tok[:strings.LastIndex(tok, ".")] + "." +
		strings.Split(p.sign(t, "rsa-1", header("RS256", "rsa-1"), p.claims(now.Add(2*time.Hour), "")), ".")[2]
	for name, token := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			c, err := v.Parse(token)
			if !errors.Is(err, auth.ErrInvalidToken) {
				t.Fatalf("Parse = %+v, %v; want ErrInvalidToken", c, err)
			}
			if c.Tenant != "" || c.Subject != "" || c.Scopes != nil || c.CrossTenant {
				t.Fatalf("refused, but returned claims %+v", c)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("the refusal took %v", d)
			}
			t.Log(err)
		})
	}
}

// TestProviderKeyRotation: a token signed with a key the provider has just
// published verifies at once (its unknown kid prompts a fetch); a token of
// a key the provider dropped is refused once strata fetches again, even
// though it verified (and was cached) before.
func TestProviderKeyRotation(t *testing.T) {
	p := newProvider(t)
	p.addKey(t, "k1", "rsa", "RS256")
	clk := &clock{t: now}
	v, keys := newProviderVerifier(t, p, clk, auth.KeySetConfig{Refresh: time.Minute, MinRefresh: time.Second})
	old := p.sign(t, "k1", header("RS256", "k1"), p.claims(now.Add(time.Hour), ""))
	if _, err := v.Parse(old); err != nil {
		t.Fatal(err)
	}
	p.addKey(t, "k2", "ec", "ES256")
	clk.add(2 * time.Second) // past MinRefresh
	fresh := p.sign(t, "k2", header("ES256", "k2"), p.claims(now.Add(time.Hour), ""))
	if _, err := v.Parse(fresh); err != nil {
		t.Fatalf("a token of the key published since: %v", err)
	}
	p.dropKey("k1")
	if _, err := v.Parse(old); err != nil {
		t.Fatalf("before strata fetches again, the dropped key's token still verifies: %v", err)
	}
	clk.add(2 * time.Second)
	if err := keys.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Parse(old); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("a token of the dropped key: %v, want refused", err)
	}
	if _, err := v.Parse(fresh); err != nil {
		t.Fatalf("the current key's token: %v", err)
	}

	// A fetch in flight began before the provider published a key: a token
	// of that key waits for it, does not find the key, and fetches again.
	clk.add(2 * time.Second)
	p.set(300*time.Millisecond, false)
	hits := p.hits.Load()
	done := make(chan error, 1)
	go func() { done <- keys.Refresh(t.Context()) }()
	for p.hits.Load() == hits {
		time.Sleep(time.Millisecond)
	}
	p.addKey(t, "k3", "rsa", "RS256")
	p.set(0, false)
	if _, err := v.Parse(p.sign(t, "k3", header("RS256", "k3"), p.claims(now.Add(time.Hour), ""))); err != nil {
		t.Fatalf("a token of a key published while a fetch was in flight: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestProviderKidFloodIsBounded: tokens naming a thousand made-up keys cost
// one fetch per MinRefresh, not one each.
func TestProviderKidFloodIsBounded(t *testing.T) {
	p := newProvider(t)
	p.addKey(t, "k1", "rsa", "RS256")
	clk := &clock{t: now}
	v, _ := newProviderVerifier(t, p, clk, auth.KeySetConfig{MinRefresh: time.Minute})
	if _, err := v.Parse(p.sign(t, "k1", header("RS256", "k1"), p.claims(now.Add(time.Hour), ""))); err != nil {
		t.Fatal(err)
	}
	before := p.hits.Load()
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kid := fmt.Sprintf("made-up-%d", i)
			if _, err := v.Parse(p.sign(t, "k1", header("RS256", kid), p.claims(now.Add(time.Hour), ""))); err == nil {
				t.Errorf("kid %s verified", kid)
			}
		}()
	}
	wg.Wait()
	if got := p.hits.Load() - before; got != 0 {
		t.Fatalf("the flood within MinRefresh of the first fetch made %d fetches, want 0", got)
	}
	clk.add(time.Minute + time.Second)
	for i := range 100 {
		_, _ = v.Parse(p.sign(t, "k1", header("RS256", fmt.Sprintf("later-%d", i)), p.claims(now.Add(time.Hour), "")))
	}
	if got := p.hits.Load() - before; got != 1 {
		t.Fatalf("a flood after MinRefresh made %d fetches, want 1", got)
	}
	t.Logf("1,100 made-up kids: %d fetches, %v", p.hits.Load()-before, time.Since(start).Round(time.Millisecond))
}

// TestProviderDownKeepsCachedKeys: while the key set answers slowly or with
// garbage, tokens of the keys fetched before keep verifying, at once, and
// the key set says it is stale; once MaxAge has passed without a good
// fetch, nothing verifies and it is not ready.
func TestProviderDownKeepsCachedKeys(t *testing.T) {
	p := newProvider(t)
	p.addKey(t, "k1", "ed25519", "EdDSA")
	clk := &clock{t: now}
	v, keys := newProviderVerifier(t, p, clk, auth.KeySetConfig{MinRefresh: time.Second, MaxAge: time.Hour, FetchTimeout: 200 * time.Millisecond})
	if err := keys.Ready(); err == nil {
		t.Fatal("ready before any key was fetched")
	}
	if err := keys.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := keys.Ready(); err != nil || keys.Stale() != "" {
		t.Fatalf("after a good fetch: ready %v, stale %q", err, keys.Stale())
	}
	for _, mode := range []struct {
		name    string
		delay   time.Duration
		garbage bool
	}{{"slow", 2 * time.Second, false}, {"garbage", 0, true}} {
		p.set(mode.delay, mode.garbage)
		clk.add(2 * time.Second)
		if err := keys.Refresh(t.Context()); err == nil {
			t.Fatalf("%s: the fetch succeeded", mode.name)
		}
		// A token not seen before (so not cached) of the known key.
		start := time.Now()
		tok := p.sign(t, "k1", header("EdDSA", "k1"), p.claims(now.Add(time.Hour), fmt.Sprintf(`"jti":%q`, mode.name)))
		if _, err := v.Parse(tok); err != nil {
			t.Fatalf("%s: a token of a cached key: %v", mode.name, err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("%s: verifying with a cached key took %v", mode.name, d)
		}
		if err := keys.Ready(); err != nil {
			t.Fatalf("%s: not ready with cached keys: %v", mode.name, err)
		}
		if s := keys.Stale(); !strings.Contains(s, "last key fetch failed") {
			t.Fatalf("%s: stale = %q", mode.name, s)
		}
	}
	clk.add(time.Hour)
	if err := keys.Ready(); err == nil || !strings.Contains(err.Error(), "last fetched") {
		t.Fatalf("past MaxAge: ready = %v", err)
	}
	if _, err := v.Parse(p.sign(t, "k1", header("EdDSA", "k1"), p.claims(now.Add(2*time.Hour), ""))); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("past MaxAge a token verified: %v", err)
	}
	p.set(0, false)
	clk.add(2 * time.Second)
	if err := keys.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := keys.Ready(); err != nil || keys.Stale() != "" {
		t.Fatalf("after the provider came back: ready %v, stale %q", err, keys.Stale())
	}
}

func TestKeySetRefusesBadProviders(t *testing.T) {
	for _, c := range []auth.KeySetConfig{{}, {Issuer: "http://idp.example.com/"}, {URL: "ftp://127.0.0.1/jwks"}, {Issuer: "not a url"}} {
		if _, err := auth.NewKeySet(c); err == nil {
			t.Errorf("NewKeySet(%+v) accepted", c)
		}
	}
	p := newProvider(t)
	p.addKey(t, "k1", "rsa", "RS256")
	// Discovery names another issuer: the configured one lacks the slash.
	keys, err := auth.NewKeySet(auth.KeySetConfig{Issuer: strings.TrimSuffix(p.issuer, "/")})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Refresh(t.Context()); err == nil || !strings.Contains(err.Error(), "names the issuer") {
		t.Fatalf("discovery of another issuer: %v", err)
	}
	// A key set whose only keys are unusable is an error, and keeps no keys.
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	p.mu.Lock()
	p.keys = []jose.JSONWebKey{{Key: small.Public(), KeyID: "small", Algorithm: "RS256"},
		{Key: p.keys[0].Key, KeyID: "enc", Use: "enc"}, {Key: small, KeyID: "private"}}
	p.mu.Unlock()
	keys, _ = auth.NewKeySet(auth.KeySetConfig{URL: p.srv.URL + "/jwks"})
	if err := keys.Refresh(t.Context()); err == nil || keys.Status().Keys != 0 {
		t.Fatalf("a set of unusable keys: %v, %d keys", err, keys.Status().Keys)
	}
	for _, c := range []auth.ProviderConfig{{Audience: "a", Keys: keys}, {Issuer: "i", Keys: keys}, {Issuer: "i", Audience: "a"},
		{Issuer: "i", Audience: "a", Keys: keys, TenantClaim: "ext..tenant"}} {
		if _, err := auth.NewProviderVerifier(c); err == nil {
			t.Errorf("NewProviderVerifier(%+v) accepted", c)
		}
	}
}
