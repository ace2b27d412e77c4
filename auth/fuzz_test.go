package auth_test

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/strata-es/strata/auth"
)

// tokenSeeds are valid tokens and the classic attacks on JWT verifiers.
func tokenSeeds() []string {
	exp := now.Add(time.Hour)
	valid := validToken()
	p := strings.Split(valid, ".")
	return []string{
		"", ".", "..", "...", valid, valid + ".", valid + "=", " " + valid, valid + "\x00",
		p[0] + "." + p[1] + ".", p[0] + ".." + p[2], "." + p[1] + "." + p[2],
		craft(`{"alg":"none"}`, claimsJSON(exp, ""), nil),
		craft(`{"alg":"none"}`, claimsJSON(exp, ""), secret),
		craft(`{"alg":"HS256","alg":"none"}`, claimsJSON(exp, ""), secret),
		craft(`{"alg":"none","alg":"HS256"}`, claimsJSON(exp, ""), secret),
		craft(`{"ALG":"HS256"}`, claimsJSON(exp, ""), secret),
		craft(`{"alg":"HS512"}`, claimsJSON(exp, ""), secret),
		craft(hs256Header, claimsJSON(exp, ""), otherSecret),
		craft(hs256Header, claimsJSON(now.Add(-time.Hour), ""), secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme"}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1e400}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":-1e400}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":9223372036854775808}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1e19}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":null}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1780318800,"exp":1}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","EXP":1780318800}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","Tenant":"other","exp":1780318800}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","tenant":"other","exp":1780318800}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"ac\u0000me","exp":1780318800}`, secret),
		craft(hs256Header, "{\"sub\":\"\xff\",\"tenant\":\"acme\",\"exp\":1780318800}", secret),
		craft(hs256Header, `{"sub":["u"],"tenant":"acme","exp":1780318800}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1780318800,"aud":1}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1780318800}`+strings.Repeat(" ", 10)+`x`, secret),
		craft(hs256Header, `[`+strings.Repeat(`[`, 2000)+strings.Repeat(`]`, 2000)+`]`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":4102444800}`, secret),          // valid for 74 years
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1000000000000000000}`, secret), // and for ever
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1780318800,"iat":1780318700}`, secret),
		craft(hs256Header, `{"sub":"u","tenant":"acme","exp":1782907200,"iat":1780315200}`, secret),
		craft(`{"alg":"HS256","crit":["b64"],"b64":false}`, claimsJSON(exp, ""), secret),
		craft(hs256Header, claimsJSON(exp, `"scope":"read\u00a0admin"`), secret),
		craft(hs256Header, claimsJSON(exp, `"scope":"read\u2003admin\u0085x"`), secret),
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range tokenSeeds() {
		f.Add(s)
	}
	v := newVerifier(f)
	f.Fuzz(func(t *testing.T, token string) {
		checkParse(t, v, token)
	})
}

// FuzzParseSigned fuzzes what a token carries rather than its bytes:
// mutations of raw header and claims JSON, signed with the secret (key
// 0), another secret (1) or not at all (2). Random bytes almost never make
// a valid signature, so FuzzParse alone would hardly reach the checks
// behind it.
func FuzzParseSigned(f *testing.F) {
	exp := now.Add(time.Hour)
	for _, h := range []string{hs256Header, `{"alg":"none"}`, `{"alg":"HS256","alg":"none"}`, `{"alg":"HS384"}`, `{}`, `null`, `{"alg":"HS256","crit":["exp"]}`} {
		for _, c := range []string{claimsJSON(exp, ""), claimsJSON(now.Add(-time.Hour), ""), claimsJSON(exp, `"scope":"admin","cross_tenant":true`),
			`{"sub":"u","tenant":"acme"}`, `{"sub":"u","tenant":"acme","exp":1e400}`, `{"sub":"u","tenant":"A","exp":1780318800}`,
			`{"sub":"u","tenant":"acme","exp":1780318800,"nbf":1780318800}`, `{"sub":"u","tenant":"acme","exp":1780315200.5}`,
			`{"sub":"u","tenant":"acme","exp":4102444800,"iat":4102444000}`, `{"sub":"u","tenant":"acme","exp":1780318800,"iat":1780315260,"scope":"a\u00a0admin"}`} {
			for key := range uint8(3) {
				f.Add(h, c, key)
			}
		}
	}
	v := newVerifier(f)
	f.Fuzz(func(t *testing.T, header, claims string, key uint8) {
		var k []byte
		switch key % 3 {
		case 0:
			k = secret
		case 1:
			k = otherSecret
		}
		_, ok := checkParse(t, v, craft(header, claims, k))
		if ok && key%3 != 0 {
			t.Fatalf("accepted a token not signed with the secret")
		}
	})
}

func TestParseSeeds(t *testing.T) {
	t.Parallel()
	v := newVerifier(t)
	for _, s := range tokenSeeds() {
		checkParse(t, v, s)
	}
}

// FuzzParseProviderSigned is FuzzParseSigned for an identity provider's
// tokens: mutations of header and claims, signed RS256 with the published
// key (0), with another key under the same kid (1), or not at all (2),
// verified against the key set fetched from the provider.
func FuzzParseProviderSigned(f *testing.F) {
	p := newProvider(f)
	p.addKey(f, "k1", "rsa", "RS256")
	other := newProvider(f)
	other.addKey(f, "k1", "rsa", "RS256")
	exp := now.Add(time.Hour)
	for _, h := range []string{header("RS256", "k1"), header("none", "k1"), header("HS256", "k1"), header("ES256", "k1"), header("RS256", "k2"),
		`{"alg":"RS256","alg":"none","kid":"k1"}`, `{"alg":"RS256","kid":"k1","crit":["exp"]}`, `{}`, `null`} {
		for _, c := range []string{p.claims(exp, ""), p.claims(now.Add(-time.Hour), ""), p.claims(exp, `"scp":["strata:admin","strata:cross_tenant"]`),
			p.claims(exp, `"scp":"strata:admin"`), p.claims(exp, `"scp":[1]`), p.claims(exp, `"client_id":"evil"`), p.claims(exp, `"aud":"x"`),
			`{"iss":"x","sub":"u","client_id":"acme","exp":1780318800}`, p.claims(now.Add(auth.MaxLifetime+time.Hour), "")} {
			for key := range uint8(3) {
				f.Add(h, c, key)
			}
		}
	}
	clk := &clock{t: now}
	v, _ := newProviderVerifier(f, p, clk, auth.KeySetConfig{MinRefresh: time.Hour})
	signers := []*provider{p, other}
	f.Fuzz(func(t *testing.T, header, claims string, key uint8) {
		in := b64([]byte(header)) + "." + b64([]byte(claims))
		token := in + "."
		if key%3 < 2 {
			digest := sha256.Sum256([]byte(in))
			signers[key%3].mu.Lock()
			priv := signers[key%3].private["k1"].(*rsa.PrivateKey)
			signers[key%3].mu.Unlock()
			sig, err := rsa.SignPKCS1v15(rand.Reader, priv, crypto.SHA256, digest[:])
			if err != nil {
				t.Fatal(err)
			}
			token += b64(sig)
		}
		c, err := v.Parse(token)
		if err != nil {
			if !errors.Is(err, auth.ErrInvalidToken) || c.Tenant != "" || c.Subject != "" || c.Scopes != nil || c.CrossTenant {
				t.Fatalf("refused with %v and claims %+v", err, c)
			}
			return
		}
		if key%3 != 0 {
			t.Fatalf("accepted a token not signed with the provider's key: %+v", c)
		}
		if c.Tenant == "" || c.Subject == "" || !c.ExpiresAt.After(now.Add(-leeway)) {
			t.Fatalf("accepted claims %+v", c)
		}
	})
}

// FuzzParseKeySet: whatever a provider answers, parsing its key set never
// panics and keeps only keys that can verify.
func FuzzParseKeySet(f *testing.F) {
	p := newProvider(f)
	p.addKey(f, "rsa", "rsa", "RS256")
	p.addKey(f, "ec", "ec", "ES256")
	p.addKey(f, "ed", "ed25519", "")
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: p.keys})
	for _, s := range []string{string(set), `{}`, `{"keys":null}`, `{"keys":[{}]}`, `{"keys":"x"}`, `[]`, ``,
		`{"keys":[{"kty":"oct","k":"AAAA","kid":"h"}]}`, `{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB","kid":"tiny"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA","kid":"bad"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := auth.ParseKeySet(body)
		if (err == nil) != (n > 0) {
			t.Fatalf("%d keys, error %v", n, err)
		}
	})
}
