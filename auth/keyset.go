package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// KeySetConfig says where an identity provider publishes its signing keys
// and how often to look.
type KeySetConfig struct {
	// Issuer is the provider's issuer URL. When URL is empty the key set's
	// address is found by OpenID Connect discovery at
	// Issuer/.well-known/openid-configuration, whose issuer must equal
	// Issuer exactly.
	Issuer string
	// URL is the JWKS address; empty: found by discovery.
	URL string
	// Refresh is how often the keys are fetched again (default 5m), so that
	// a key the provider drops stops verifying within Refresh.
	Refresh time.Duration
	// MinRefresh (default 10s): a token naming a key the set does not hold
	// prompts a fetch (the provider rotated) at most this often, however
	// many such tokens arrive; a failed fetch is retried this often.
	MinRefresh time.Duration
	// MaxAge is how long keys stay in use after the last fetch that
	// succeeded (default 24h): while the provider is down, tokens signed
	// with a key fetched before keep verifying for this long.
	MaxAge time.Duration
	// FetchTimeout bounds one fetch, discovery included (default 5s).
	FetchTimeout time.Duration
	// Client fetches (default: an http.Client without redirects to other
	// schemes; its timeout is FetchTimeout).
	Client *http.Client
	Logger *slog.Logger
	Now    func() time.Time
}

func (c *KeySetConfig) setDefaults() {
	if c.Refresh <= 0 {
		c.Refresh = 5 * time.Minute
	}
	if c.MinRefresh <= 0 {
		c.MinRefresh = 10 * time.Second
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 24 * time.Hour
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = 5 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// maxKeySetBytes bounds a discovery document or a key set: a provider's
// is a few KiB, and a hostile or broken one must not fill memory.
const maxKeySetBytes = 1 << 20

// KeySet is an identity provider's published signing keys, fetched and kept
// fresh: every Refresh, and when a token names a key it does not hold (at
// most every MinRefresh). A failed fetch keeps the keys it had (for MaxAge
// after the last good one) and is reported by Status.
type KeySet struct {
	cfg KeySetConfig

	mu        sync.Mutex
	keys      map[string]publicKey // by kid
	jwksURL   string               // cfg.URL, or found by discovery
	fetchedAt time.Time            // of the last fetch that succeeded
	kidFetch  time.Time            // when an unknown kid last prompted a fetch
	lastErr   error                // of the last fetch; nil when it succeeded
	fetching  chan struct{}        // closed when the fetch in flight ends
	fetches   int64
}

type publicKey struct {
	key crypto.PublicKey
	alg string // the JWK's alg; empty: any algorithm of the key's type
}

// KeySetStatus is what a key set knows of its provider.
type KeySetStatus struct {
	Keys      int
	FetchedAt time.Time // zero: never
	LastError string    // of the last fetch; empty when it succeeded
	Fetches   int64
}

// NewKeySet returns a key set for cfg. It holds no keys until the first
// fetch: Run fetches at once, and so does the first token that needs one.
func NewKeySet(cfg KeySetConfig) (*KeySet, error) {
	cfg.setDefaults()
	if cfg.URL == "" && cfg.Issuer == "" {
		return nil, errors.New("a key set needs its JWKS URL or the issuer to discover it from")
	}
	for _, u := range []string{cfg.Issuer, cfg.URL} {
		if u == "" {
			continue
		}
		if err := checkProviderURL(u); err != nil {
			return nil, err
		}
	}
	return &KeySet{cfg: cfg, keys: map[string]publicKey{}, jwksURL: cfg.URL}, nil
}

// checkProviderURL accepts https URLs, and http ones on a loopback host
// (a provider on the same machine, as in tests).
func checkProviderURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not an absolute URL", raw)
	}
	switch {
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && (u.Hostname() == "localhost" || strings.HasPrefix(u.Hostname(), "127.") || u.Hostname() == "::1"):
		return nil
	}
	return fmt.Errorf("%q: an identity provider is reached over https (http only on a loopback address)", raw)
}

// Run keeps the keys fresh until ctx ends: it fetches at once, then every
// Refresh, and every MinRefresh while fetches fail.
func (k *KeySet) Run(ctx context.Context) {
	for {
		wait := k.cfg.Refresh
		if err := k.refresh(ctx, false); err != nil {
			wait = k.cfg.MinRefresh
			k.cfg.Logger.Warn("cannot fetch the identity provider's keys; serving with the keys fetched before",
				"error", err.Error(), "keys", k.Status().Keys, "retry_in", wait.String())
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Refresh fetches the keys now (or waits for the fetch in flight).
func (k *KeySet) Refresh(ctx context.Context) error { return k.refresh(ctx, false) }

// Status reports the keys held and the last fetch.
func (k *KeySet) Status() KeySetStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := KeySetStatus{Keys: len(k.keys), FetchedAt: k.fetchedAt, Fetches: k.fetches}
	if k.lastErr != nil {
		st.LastError = k.lastErr.Error()
	}
	return st
}

// Ready returns an error when no key can verify a token: none fetched yet,
// or the last good fetch is older than MaxAge.
func (k *KeySet) Ready() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.usableLocked() {
		return nil
	}
	if k.fetchedAt.IsZero() {
		if k.lastErr != nil {
			return fmt.Errorf("no signing keys fetched from the identity provider yet: %v", k.lastErr)
		}
		return errors.New("no signing keys fetched from the identity provider yet")
	}
	return fmt.Errorf("the identity provider's keys were last fetched %s ago, longer than the %s they are trusted without a refresh: %v",
		k.cfg.Now().Sub(k.fetchedAt).Round(time.Second), k.cfg.MaxAge, k.lastErr)
}

// Stale returns a warning while the keys in use are not the provider's
// latest (the last fetch failed); empty otherwise.
func (k *KeySet) Stale() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lastErr == nil || !k.usableLocked() {
		return ""
	}
	return fmt.Sprintf("identity provider: the last key fetch failed (%v); verifying with the %d keys fetched %s ago, for at most %s",
		k.lastErr, len(k.keys), k.cfg.Now().Sub(k.fetchedAt).Round(time.Second), k.cfg.MaxAge)
}

func (k *KeySet) usableLocked() bool {
	return !k.fetchedAt.IsZero() && k.cfg.Now().Sub(k.fetchedAt) <= k.cfg.MaxAge
}

// errKeyUnknown: the set holds no such key, even after a fetch allowed now.
var errKeyUnknown = errors.New("the token's key is not among the identity provider's keys")

// key returns the key kid. A kid the set does not hold prompts a fetch
// when no kid prompted one in the last MinRefresh, so a rotation at the
// provider is followed at once while a flood of made-up kids costs at most
// one fetch per MinRefresh. A fetch in flight is waited for first: it may
// hold the key, or it may have begun before the provider published it.
func (k *KeySet) key(ctx context.Context, kid string) (publicKey, error) {
	if pk, ok := k.lookup(kid); ok {
		return pk, nil
	}
	k.mu.Lock()
	ch := k.fetching
	k.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return publicKey{}, ctx.Err()
		}
		if pk, ok := k.lookup(kid); ok {
			return pk, nil
		}
	}
	if err := k.refresh(ctx, true); err != nil && !errors.Is(err, errTooSoon) {
		return publicKey{}, err
	}
	if pk, ok := k.lookup(kid); ok {
		return pk, nil
	}
	if k.Ready() != nil {
		return publicKey{}, errors.New("no usable signing keys from the identity provider")
	}
	return publicKey{}, errKeyUnknown
}

// lookup returns the key kid while the set holds it and its keys are in
// use (fetched within MaxAge).
func (k *KeySet) lookup(kid string) (publicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	pk, ok := k.keys[kid]
	return pk, ok && k.usableLocked()
}

var errTooSoon = errors.New("a key fetch was prompted moments ago")

// refresh fetches the key set. A periodic refresh (kidPrompted false) that
// finds a fetch in flight waits for it instead. A refresh prompted by an
// unknown kid does nothing when another was prompted within MinRefresh;
// otherwise it waits for the fetch in flight (begun before the kid was
// seen, it may predate the key) and then fetches itself.
func (k *KeySet) refresh(ctx context.Context, kidPrompted bool) error {
	k.mu.Lock()
	if kidPrompted {
		now := k.cfg.Now()
		if !k.kidFetch.IsZero() && now.Sub(k.kidFetch) < k.cfg.MinRefresh {
			k.mu.Unlock()
			return errTooSoon
		}
		k.kidFetch = now
	}
	for k.fetching != nil {
		ch := k.fetching
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		k.mu.Lock()
		if !kidPrompted {
			defer k.mu.Unlock()
			return k.lastErr
		}
	}
	ch := make(chan struct{})
	k.fetching = ch
	jwksURL := k.jwksURL
	k.mu.Unlock()

	// The fetch is shared: the request that began it may go away, the fetch
	// does not.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.FetchTimeout)
	defer cancel()
	var keys map[string]publicKey
	err := func() (err error) {
		if jwksURL == "" {
			if jwksURL, err = k.discover(fctx); err != nil {
				return err
			}
		}
		keys, err = k.fetch(fctx, jwksURL)
		return err
	}()

	k.mu.Lock()
	k.fetches++
	k.lastErr = err
	if err == nil {
		k.keys, k.fetchedAt, k.jwksURL = keys, k.cfg.Now(), jwksURL
	}
	k.fetching = nil
	close(ch)
	k.mu.Unlock()
	return err
}

// discover reads the issuer's OpenID Connect discovery document.
func (k *KeySet) discover(ctx context.Context) (string, error) {
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	where := strings.TrimSuffix(k.cfg.Issuer, "/") + "/.well-known/openid-configuration"
	body, err := k.get(ctx, where)
	if err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("discovery: %s is not a discovery document: %v", where, err)
	}
	if doc.Issuer != k.cfg.Issuer {
		// OpenID Connect Discovery 1.0, 4.3: they must be identical.
		return "", fmt.Errorf("discovery: %s names the issuer %q, not %q", where, doc.Issuer, k.cfg.Issuer)
	}
	if err := checkProviderURL(doc.JWKSURI); err != nil {
		return "", fmt.Errorf("discovery: jwks_uri: %w", err)
	}
	return doc.JWKSURI, nil
}

// fetch reads a JWK set and keeps the keys that can verify a token.
func (k *KeySet) fetch(ctx context.Context, where string) (map[string]publicKey, error) {
	body, err := k.get(ctx, where)
	if err != nil {
		return nil, err
	}
	return parseKeySet(body, k.cfg.Logger)
}

func (k *KeySet) get(ctx context.Context, where string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", where, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", where, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySetBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", where, err)
	}
	if len(body) > maxKeySetBytes {
		return nil, fmt.Errorf("GET %s: the answer is larger than %d bytes", where, maxKeySetBytes)
	}
	return body, nil
}

// parseKeySet keeps the public signature keys of a JWK set (RFC 7517):
// RSA of 2048 bits or more, ECDSA on P-256, P-384 or P-521, and Ed25519.
// Keys of other types or uses are skipped (a provider publishes encryption
// keys too); a kid used twice is skipped, since which key it names would
// be a guess; a set that leaves no key is an error, so that a broken
// answer never replaces good keys.
func parseKeySet(body []byte, logger *slog.Logger) (map[string]publicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("not a JWK set: %v", err)
	}
	keys := map[string]publicKey{}
	dup := map[string]bool{}
	for i, raw := range set.Keys {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(raw); err != nil {
			logger.Debug("skipping a key of the identity provider's set", "index", i, "error", err.Error())
			continue
		}
		if jwk.Use != "" && jwk.Use != "sig" {
			continue
		}
		if !jwk.IsPublic() {
			logger.Warn("the identity provider publishes a private key; it is not used", "kid", jwk.KeyID)
			continue
		}
		if !keyFits(jwk.Key, jwk.Algorithm) {
			logger.Debug("skipping a key of the identity provider's set", "kid", jwk.KeyID, "alg", jwk.Algorithm)
			continue
		}
		if _, seen := keys[jwk.KeyID]; seen || dup[jwk.KeyID] {
			delete(keys, jwk.KeyID)
			dup[jwk.KeyID] = true
			logger.Warn("the identity provider's key set names two keys with one kid; neither is used", "kid", jwk.KeyID)
			continue
		}
		keys[jwk.KeyID] = publicKey{key: jwk.Key, alg: jwk.Algorithm}
	}
	if len(keys) == 0 {
		return nil, errors.New("the JWK set holds no usable signature key")
	}
	return keys, nil
}

// keyFits reports whether key is a supported public key and alg (when
// set) an algorithm for it.
func keyFits(key any, alg string) bool {
	var algs []string
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return false
		}
		algs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case *ecdsa.PublicKey:
		switch k.Curve.Params().Name {
		case "P-256":
			algs = []string{"ES256"}
		case "P-384":
			algs = []string{"ES384"}
		case "P-521":
			algs = []string{"ES512"}
		default:
			return false
		}
	case ed25519.PublicKey:
		algs = []string{"EdDSA"}
	default:
		return false
	}
	if alg == "" {
		return true
	}
	for _, a := range algs {
		if a == alg {
			return true
		}
	}
	return false
}
