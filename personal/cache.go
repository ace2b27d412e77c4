package personal

import (
	"crypto/cipher"
	"sync"

	"github.com/strata-es/strata/internal/lru"
)

// keyCache bounds what a keyring holds in memory: subjects' key IDs, and
// data keys unwrapped (or known destroyed: a destroyed key never comes
// back, its ID being random).
type keyCache struct {
	mu       sync.Mutex
	subjects *lru.Cache[tenantKey, string]      // subject hash -> key ID
	keys     *lru.Cache[tenantKey, cipher.AEAD] // key ID -> key; nil: destroyed
}

type tenantKey struct{ tenant, id string }

func newKeyCache(n int) *keyCache {
	return &keyCache{subjects: lru.New[tenantKey, string](n), keys: lru.New[tenantKey, cipher.AEAD](n)}
}

func (c *keyCache) subject(tenant, hash string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subjects.Get(tenantKey{tenant, hash})
}

func (c *keyCache) putSubject(tenant, hash, keyID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subjects.Put(tenantKey{tenant, hash}, keyID)
}

// key returns the cached key keyID: shredded when it is known destroyed,
// ok false when the cache does not know it.
func (c *keyCache) key(tenant, keyID string) (aead cipher.AEAD, shredded, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	aead, ok = c.keys.Get(tenantKey{tenant, keyID})
	return aead, ok && aead == nil, ok
}

// putKey caches key keyID; nil records it destroyed.
func (c *keyCache) putKey(tenant, keyID string, aead cipher.AEAD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys.Put(tenantKey{tenant, keyID}, aead)
}

func (c *keyCache) forget(tenant, hash, keyID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subjects.Delete(tenantKey{tenant, hash})
	c.keys.Delete(tenantKey{tenant, keyID})
}

// clear forgets everything.
func (c *keyCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.keys.Cap()
	c.subjects, c.keys = lru.New[tenantKey, string](n), lru.New[tenantKey, cipher.AEAD](n)
}
