package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/strata-es/strata/auth"
)

// bearerTokens is how serve verifies the API's bearer tokens: an identity
// provider's (STRATA_OIDC_ISSUER), or strata's own HS256 tokens
// (STRATA_JWT_SECRET, or the development secret in the data directory).
type bearerTokens struct {
	verifier auth.TokenVerifier
	keys     *auth.KeySet // the provider's keys; nil with HS256
	secret   []byte       // the HS256 secret; nil with a provider
	dev      bool         // the secret is the generated development one
}

// errBothIdentities: a process verifying both kinds of token would let
// whoever holds the shared secret mint what the provider never issued.
var errBothIdentities = errors.New("STRATA_JWT_SECRET and STRATA_OIDC_ISSUER are both set: strata verifies either its own HS256 tokens (development) or an identity provider's, not both; unset one")

// bearerTokens reads the token settings. With a provider, the keys are not
// fetched here: the caller runs the key set (KeySet.Run), and /readyz
// says whether it has keys.
func (e env) bearerTokens(logger *slog.Logger) (bearerTokens, error) {
	issuer := e.str("STRATA_OIDC_ISSUER", "")
	if issuer == "" {
		for _, n := range []string{"STRATA_OIDC_JWKS_URL", "STRATA_OIDC_AUDIENCE", "STRATA_OIDC_TENANT_CLAIM", "STRATA_OIDC_SCOPE_CLAIMS", "STRATA_OIDC_SCOPE_PREFIX"} {
			if e.str(n, "") != "" {
				return bearerTokens{}, fmt.Errorf("%s is set but STRATA_OIDC_ISSUER is not: an identity provider's tokens are checked against its issuer", n)
			}
		}
		secret, dev, err := e.jwtSecret()
		if err != nil {
			return bearerTokens{}, err
		}
		v, err := auth.NewVerifier(secret, nil)
		if err != nil {
			return bearerTokens{}, err
		}
		return bearerTokens{verifier: v, secret: secret, dev: dev}, nil
	}
	if e.str("STRATA_JWT_SECRET", "") != "" {
		return bearerTokens{}, errBothIdentities
	}
	audience := e.str("STRATA_OIDC_AUDIENCE", "")
	if audience == "" {
		return bearerTokens{}, errors.New("STRATA_OIDC_AUDIENCE is required with STRATA_OIDC_ISSUER: the aud a token must carry to be meant for strata")
	}
	ks := auth.KeySetConfig{Issuer: issuer, URL: e.str("STRATA_OIDC_JWKS_URL", ""), Logger: logger.With("component", "identity provider")}
	var err error
	if ks.Refresh, err = e.duration("STRATA_OIDC_JWKS_REFRESH", 0); err != nil {
		return bearerTokens{}, err
	}
	if ks.MinRefresh, err = e.duration("STRATA_OIDC_JWKS_MIN_REFRESH", 0); err != nil {
		return bearerTokens{}, err
	}
	if ks.MaxAge, err = e.duration("STRATA_OIDC_JWKS_MAX_AGE", 0); err != nil {
		return bearerTokens{}, err
	}
	keys, err := auth.NewKeySet(ks)
	if err != nil {
		return bearerTokens{}, fmt.Errorf("STRATA_OIDC_ISSUER / STRATA_OIDC_JWKS_URL: %w", err)
	}
	var scopeClaims []string
	for _, c := range strings.Split(e.str("STRATA_OIDC_SCOPE_CLAIMS", ""), ",") {
		if c = strings.TrimSpace(c); c != "" {
			scopeClaims = append(scopeClaims, c)
		}
	}
	v, err := auth.NewProviderVerifier(auth.ProviderConfig{Issuer: issuer, Audience: audience, Keys: keys,
		TenantClaim: e.str("STRATA_OIDC_TENANT_CLAIM", ""), ScopeClaims: scopeClaims, ScopePrefix: e.str("STRATA_OIDC_SCOPE_PREFIX", "")})
	if err != nil {
		return bearerTokens{}, fmt.Errorf("STRATA_OIDC_*: %w", err)
	}
	return bearerTokens{verifier: v, keys: keys}, nil
}

// watch runs the provider's key set for as long as ctx, and adds its state
// to /readyz: not ready while no key can verify a token, a warning while
// the keys in use are older than the provider's (its last fetch failed).
func (id bearerTokens) watch(ctx context.Context, a *app) {
	if id.keys == nil {
		return
	}
	go id.keys.Run(ctx)
	a.readiness = append(a.readiness, readinessCheck{"identity_provider", func(context.Context) error { return id.keys.Ready() }})
	a.readyInfo = append(a.readyInfo, func(body map[string]any) {
		if s := id.keys.Stale(); s != "" {
			body["warnings"] = append(body["warnings"].([]string), s)
		}
	})
}
