package auth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// verifiedCache keeps tokens that passed every check, by their SHA-256: a
// client sends the same token with every request, and verifying it (a
// signature, two JSON decodes) was a sixth of the query API's CPU. Entries
// are keyed by the whole token (signature included) and each is used only
// until its token expires. keyID names the signing key, so that a token is
// no longer taken from the cache once its provider has dropped the key.
type verifiedCache struct {
	mu sync.Mutex
	m  map[[32]byte]cachedToken
}

type cachedToken struct {
	claims Claims
	keyID  string
}

// verifiedCacheSize bounds the verified-token cache.
const verifiedCacheSize = 10_000

func newVerifiedCache() *verifiedCache {
	return &verifiedCache{m: map[[32]byte]cachedToken{}}
}

// get returns the cached entry of token while it has not expired at now.
func (c *verifiedCache) get(token string, now time.Time) (cachedToken, [32]byte, bool) {
	key := sha256.Sum256([]byte(token))
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && now.Before(e.claims.ExpiresAt.Add(leeway)) {
		return e, key, true
	}
	return cachedToken{}, key, false
}

func (c *verifiedCache) put(key [32]byte, e cachedToken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= verifiedCacheSize {
		for k := range c.m { // evict an arbitrary entry
			delete(c.m, k)
			break
		}
	}
	c.m[key] = e
}
