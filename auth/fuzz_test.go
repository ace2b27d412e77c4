package auth_test

import (
	"strings"
	"testing"
	"time"
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
