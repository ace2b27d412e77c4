package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/strata-es/strata/domain"
)

// ProviderConfig says which identity provider's tokens to accept and how
// their claims map onto strata's tenant and scopes, so that no provider
// has to change for strata.
type ProviderConfig struct {
	// Issuer must equal the token's iss.
	Issuer string
	// Audience must be among the token's aud.
	Audience string
	// TenantClaim names the claim that holds the tenant (default
	// "tenant"); a dotted path reaches into an object ("ext.tenant"), and
	// "client_id" or "azp" make each OAuth client a tenant.
	TenantClaim string
	// ScopeClaims name the claims that hold scopes (default "scope" and
	// "scp"): a string delimited by spaces, or an array of strings (a
	// roles claim is one too).
	ScopeClaims []string
	// ScopePrefix, when set, is the prefix that marks strata's scopes in
	// them ("strata:admin" with prefix "strata:"); others are ignored. The
	// scope cross_tenant grants Claims.CrossTenant.
	ScopePrefix string
	Keys        *KeySet
	Now         func() time.Time
}

// providerAlgs are the signature algorithms accepted from a provider: its
// published public keys verify them, so no one who can verify can sign.
// "none" and the HMAC algorithms are never accepted here.
var providerAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// ProviderVerifier checks tokens an identity provider signed with the keys
// it publishes (a JWKS), and maps their claims.
type ProviderVerifier struct {
	cfg    ProviderConfig
	parser *jwt.Parser
	known  []string // claim names checked for case and duplicates
	cache  *verifiedCache
}

// NewProviderVerifier returns a verifier for cfg.
func NewProviderVerifier(cfg ProviderConfig) (*ProviderVerifier, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("an identity provider's tokens need the issuer to check their iss against")
	}
	if cfg.Audience == "" {
		return nil, errors.New("an identity provider's tokens need the audience strata checks their aud against")
	}
	if cfg.Keys == nil {
		return nil, errors.New("an identity provider's tokens need its key set")
	}
	if cfg.TenantClaim == "" {
		cfg.TenantClaim = "tenant"
	}
	if len(cfg.ScopeClaims) == 0 {
		cfg.ScopeClaims = []string{"scope", "scp"}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	known := []string{"sub", "exp", "iat", "nbf", "iss", "aud", "jti"}
	for _, c := range append([]string{cfg.TenantClaim}, cfg.ScopeClaims...) {
		if c == "" || strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".") || strings.Contains(c, "..") {
			return nil, fmt.Errorf("claim name %q: want a name, or a dotted path into an object", c)
		}
		top, _, _ := strings.Cut(c, ".")
		known = append(known, top)
	}
	return &ProviderVerifier{
		cfg:   cfg,
		known: known,
		cache: newVerifiedCache(),
		parser: jwt.NewParser(
			jwt.WithValidMethods(providerAlgs),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(leeway),
			jwt.WithTimeFunc(cfg.Now),
			jwt.WithStrictDecoding(),
		),
	}, nil
}

// Parse verifies token and returns its claims. Every failure wraps
// ErrInvalidToken.
func (v *ProviderVerifier) Parse(token string) (Claims, error) {
	if token == "" || len(token) > maxTokenLen {
		return Claims{}, fmt.Errorf("%w: empty or oversized", ErrInvalidToken)
	}
	if !compactJWS(token) {
		return Claims{}, fmt.Errorf("%w: not three base64url segments", ErrInvalidToken)
	}
	hit, key, ok := v.cache.get(token, v.cfg.Now())
	if ok {
		if _, inUse := v.cfg.Keys.lookup(hit.keyID); inUse { // a dropped key's tokens leave with it
			return hit.claims, nil
		}
	}
	c, kid, err := v.verify(token)
	if err != nil {
		return Claims{}, err
	}
	v.cache.put(key, cachedToken{claims: c, keyID: kid})
	return c, nil
}

// keyWait bounds how long a request whose token names a key the set does
// not hold waits for a fetch of the provider's keys (a slow provider must
// not hold a flood of such requests for the whole fetch timeout).
const keyWait = 2 * time.Second

func (v *ProviderVerifier) verify(token string) (Claims, string, error) {
	mc := jwt.MapClaims{}
	var kid string
	tok, err := v.parser.ParseWithClaims(token, mc, func(t *jwt.Token) (any, error) {
		// The claims are not verified yet; they are only looked at so that a
		// token of another issuer, or one expired, never prompts a fetch.
		if iss, _ := mc.GetIssuer(); iss != v.cfg.Issuer {
			return nil, errors.New("another issuer's token")
		}
		if exp, _ := mc.GetExpirationTime(); exp == nil || v.cfg.Now().After(exp.Add(leeway)) {
			return nil, errors.New("expired")
		}
		kid, _ = t.Header["kid"].(string)
		ctx, cancel := context.WithTimeout(context.Background(), keyWait)
		defer cancel()
		pk, err := v.cfg.Keys.key(ctx, kid)
		if err != nil {
			return nil, err
		}
		if alg := t.Method.Alg(); pk.alg != "" && pk.alg != alg || !keyFits(pk.key, alg) {
			// A key published for one algorithm verifies no other.
			return nil, fmt.Errorf("the token says %s, the key %q is for %s", alg, kid, keyAlgs(pk))
		}
		return pk.key, nil
	})
	if err != nil {
		return Claims{}, "", fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if _, ok := tok.Header["crit"]; ok {
		// RFC 7515 4.1.11: no critical extension is understood.
		return Claims{}, "", fmt.Errorf("%w: the header has crit, and no critical extension is supported", ErrInvalidToken)
	}
	exp, _ := mc.GetExpirationTime()
	lifetime := exp.Sub(v.cfg.Now())
	if iat, _ := mc.GetIssuedAt(); iat != nil {
		lifetime = exp.Sub(iat.Time)
	}
	if lifetime > MaxLifetime {
		return Claims{}, "", fmt.Errorf("%w: valid for %s, longer than %s", ErrInvalidToken, lifetime.Round(time.Second), MaxLifetime)
	}
	if err := checkClaimKeys(token, v.known); err != nil {
		return Claims{}, "", fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	c, err := v.mapClaims(mc)
	if err != nil {
		return Claims{}, "", fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	c.ExpiresAt = exp.Time
	return c, kid, nil
}

// mapClaims reads the subject, the tenant and the scopes of verified claims.
func (v *ProviderVerifier) mapClaims(mc jwt.MapClaims) (Claims, error) {
	sub, _ := mc.GetSubject()
	if sub == "" || len(sub) > 256 {
		return Claims{}, errors.New("sub claim missing or too long")
	}
	raw, _ := claimAt(mc, v.cfg.TenantClaim).(string)
	tenant, err := domain.ParseTenantID(raw)
	if err != nil {
		return Claims{}, fmt.Errorf("the tenant claim %s is missing or malformed", v.cfg.TenantClaim)
	}
	c := Claims{Subject: sub, Tenant: tenant}
	var scopes []string
	for _, name := range v.cfg.ScopeClaims {
		switch s := claimAt(mc, name).(type) {
		case nil:
		case string:
			scopes = splitScope(s, scopes)
		case []any:
			for _, x := range s {
				str, ok := x.(string)
				if !ok || str == "" || strings.Contains(str, " ") {
					return Claims{}, fmt.Errorf("the scope claim %s holds something other than scope names", name)
				}
				scopes = append(scopes, str)
			}
		default:
			return Claims{}, fmt.Errorf("the scope claim %s is neither a string nor an array of strings", name)
		}
	}
	for _, s := range scopes {
		if v.cfg.ScopePrefix != "" {
			var ok bool
			if s, ok = strings.CutPrefix(s, v.cfg.ScopePrefix); !ok {
				continue
			}
		}
		if s == "cross_tenant" {
			c.CrossTenant = true
			continue
		}
		c.Scopes = append(c.Scopes, s)
	}
	return c, nil
}

// claimAt follows a dotted path into the claims.
func claimAt(mc jwt.MapClaims, path string) any {
	var cur any = map[string]any(mc)
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

func keyAlgs(pk publicKey) string {
	if pk.alg != "" {
		return pk.alg
	}
	return fmt.Sprintf("%T keys", pk.key)
}
