// Package auth verifies and issues the bearer tokens of strata's HTTP APIs:
// HS256 JWTs whose claims carry the subject, the tenant (the only source of
// a request's tenant), the expiry and optional scopes. It also keeps the
// development signing secret in the data directory.
package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/strata-es/strata/domain"
)

// Scopes understood by the APIs.
const (
	// ScopeAdmin opens /v1/admin/... for the token's tenant.
	ScopeAdmin = "admin"
	// ScopePlatform opens /v1/platform/...: the tenant directory of the
	// whole installation (provision, suspend, resume). It is the platform
	// operator's, never a tenant's: admin does not imply it, and the
	// token's tenant does not limit it.
	ScopePlatform = "platform"
)

// Claims are the verified contents of a token.
type Claims struct {
	Subject string
	Tenant  domain.TenantID
	Scopes  []string
	// CrossTenant lets an admin token look at every tenant's projection
	// and dead-letter state; such reads are audited.
	CrossTenant bool
	ExpiresAt   time.Time
}

// HasScope reports whether the token carries scope s.
func (c Claims) HasScope(s string) bool {
	for _, x := range c.Scopes {
		if x == s {
			return true
		}
	}
	return false
}

// TokenVerifier turns a bearer token into its verified claims. Verifier
// checks strata's own HS256 tokens (development, `strata token`);
// ProviderVerifier checks an identity provider's tokens against its
// published keys.
type TokenVerifier interface {
	Parse(token string) (Claims, error)
}

// ErrInvalidToken is returned for every token that fails verification. Its
// wrapped detail is for logs; clients get one generic answer.
var ErrInvalidToken = errors.New("invalid token")

// MinSecretLen is the shortest accepted HS256 secret, in bytes.
const MinSecretLen = 32

// maxTokenLen bounds the work done on a hostile Authorization header.
const maxTokenLen = 4096

// MaxLifetime is the longest a token may be valid: exp - iat, or exp - now
// for a token without iat. A leaked token must expire on its own; without
// a bound, a signer's exp of 10^18 made one valid forever. Sign refuses a
// longer ttl, and so does `strata token --ttl`.
const MaxLifetime = 31 * 24 * time.Hour

type wireClaims struct {
	jwt.RegisteredClaims
	Tenant      string `json:"tenant"`
	Scope       string `json:"scope,omitempty"`
	CrossTenant bool   `json:"cross_tenant,omitempty"`
}

// Verifier checks tokens signed with one secret.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
	now    func() time.Time
	cache  *verifiedCache
}

// NewVerifier returns a verifier for secret. now may be nil (time.Now).
func NewVerifier(secret []byte, now func() time.Time) (*Verifier, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("jwt secret must be at least %d bytes", MinSecretLen)
	}
	if now == nil {
		now = time.Now
	}
	return &Verifier{
		now:    now,
		cache:  newVerifiedCache(),
		secret: secret,
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{"HS256"}), // no "none", no algorithm confusion
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(), // iat, when present, is not in the future (beyond leeway)
			jwt.WithLeeway(leeway),
			jwt.WithTimeFunc(now),
			jwt.WithStrictDecoding(),
		),
	}, nil
}

// Parse verifies token and returns its claims. Every failure wraps
// ErrInvalidToken.
func (v *Verifier) Parse(token string) (Claims, error) {
	if token == "" || len(token) > maxTokenLen {
		return Claims{}, fmt.Errorf("%w: empty or oversized", ErrInvalidToken)
	}
	if !compactJWS(token) {
		return Claims{}, fmt.Errorf("%w: not three base64url segments", ErrInvalidToken)
	}
	hit, key, ok := v.cache.get(token, v.now())
	if ok {
		return hit.claims, nil
	}
	c, err := v.verify(token)
	if err != nil {
		return Claims{}, err
	}
	v.cache.put(key, cachedToken{claims: c})
	return c, nil
}

// compactJWS reports whether token is three dot-separated segments of the
// base64url alphabet, nothing else. Go's base64 decoders skip CR and LF, so
// without this check a token with line breaks inside a segment would verify
// as the token without them: one signature, many accepted strings (found
// by FuzzParse).
func compactJWS(token string) bool {
	dots := 0
	for i := 0; i < len(token); i++ {
		switch c := token[i]; {
		case c == '.':
			dots++
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return dots == 2
}

// leeway is the clock skew tolerated on exp, nbf and iat.
const leeway = 30 * time.Second

func (v *Verifier) verify(token string) (Claims, error) {
	var wc wireClaims
	tok, err := v.parser.ParseWithClaims(token, &wc, func(*jwt.Token) (any, error) { return v.secret, nil })
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if _, ok := tok.Header["crit"]; ok {
		// RFC 7515 4.1.11: a recipient must refuse a token whose crit names
		// an extension it does not understand, and we understand none.
		return Claims{}, fmt.Errorf("%w: the header has crit, and no critical extension is supported", ErrInvalidToken)
	}
	lifetime := wc.ExpiresAt.Sub(v.now())
	if wc.IssuedAt != nil {
		lifetime = wc.ExpiresAt.Sub(wc.IssuedAt.Time)
	}
	if lifetime > MaxLifetime {
		return Claims{}, fmt.Errorf("%w: valid for %s, longer than %s", ErrInvalidToken, lifetime.Round(time.Second), MaxLifetime)
	}
	if err := checkClaimKeys(token, knownClaims); err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	tenant, err := domain.ParseTenantID(wc.Tenant)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: tenant claim missing or malformed", ErrInvalidToken)
	}
	if wc.Subject == "" || len(wc.Subject) > 256 {
		return Claims{}, fmt.Errorf("%w: sub claim missing or too long", ErrInvalidToken)
	}
	return Claims{Subject: wc.Subject, Tenant: tenant, CrossTenant: wc.CrossTenant, ExpiresAt: wc.ExpiresAt.Time,
		Scopes: splitScope(wc.Scope, nil)}, nil
}

// splitScope appends the scopes of a scope claim to to. scope is a list
// delimited by U+0020 (RFC 8693 4.2, RFC 6749 3.3), nothing else:
// strings.Fields also splits on U+00A0 and the like, so "read\u00a0admin",
// one scope to the signer, granted admin.
func splitScope(scope string, to []string) []string {
	for _, s := range strings.Split(scope, " ") {
		if s != "" {
			to = append(to, s)
		}
	}
	return to
}

// Sign issues a token for c valid for ttl, at most MaxLifetime.
func Sign(secret []byte, c Claims, ttl time.Duration) (string, error) {
	if len(secret) < MinSecretLen {
		return "", fmt.Errorf("jwt secret must be at least %d bytes", MinSecretLen)
	}
	if ttl > MaxLifetime {
		return "", fmt.Errorf("a token may be valid for at most %s, not %s", MaxLifetime, ttl)
	}
	if _, err := domain.ParseTenantID(string(c.Tenant)); err != nil {
		return "", err
	}
	if c.Subject == "" {
		return "", errors.New("subject is required")
	}
	now := time.Now()
	wc := wireClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:   c.Subject,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Tenant:      string(c.Tenant),
		Scope:       strings.Join(c.Scopes, " "),
		CrossTenant: c.CrossTenant,
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, wc).SignedString(secret)
}

// SecretFile is the development secret's file name in the data directory.
const SecretFile = "jwt-secret"

// LoadOrCreateSecret returns the development secret kept in dir, creating a
// random one (mode 0600) on first use. Production sets STRATA_JWT_SECRET.
func LoadOrCreateSecret(dir string) ([]byte, error) {
	path := filepath.Join(dir, SecretFile)
	if b, err := os.ReadFile(path); err == nil {
		s := strings.TrimSpace(string(b))
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("%s holds a secret shorter than %d bytes: delete it to generate a new one", path, MinSecretLen)
		}
		return []byte(s), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read jwt secret: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	s := hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) { // another process won the race
		return LoadOrCreateSecret(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("create jwt secret: %w", err)
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return nil, err
	}
	return []byte(s), f.Close()
}

// knownClaims are the claim names strata reads or the JWT library checks.
var knownClaims = []string{"sub", "tenant", "exp", "iat", "nbf", "iss", "aud", "jti", "scope", "cross_tenant"}

// checkClaimKeys closes the gaps encoding/json leaves in a signed claims
// set: it matches keys case-insensitively ("Tenant" would override
// "tenant") and keeps the last of duplicate keys. A token whose signer
// wrote either is refused, as is a time claim that is not a JSON number.
func checkClaimKeys(token string, known []string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("malformed")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return errors.New("malformed claims encoding")
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return errors.New("claims are not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return errors.New("malformed claims")
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("duplicate claim %.32q", key)
		}
		seen[key] = true
		for _, k := range known {
			if key != k && strings.EqualFold(key, k) {
				return fmt.Errorf("claim %.32q differs from %q only in case", key, k)
			}
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return errors.New("malformed claims")
		}
		if (key == "exp" || key == "iat" || key == "nbf") && (len(raw) == 0 || raw[0] < '0' || raw[0] > '9') {
			return fmt.Errorf("claim %q must be a number", key)
		}
	}
	return nil
}
