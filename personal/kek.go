package personal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// KEK is a key-encryption key: it wraps and unwraps data keys. The
// associated data binds a wrapped key to its tenant and key ID, so a
// wrapped key copied to another row does not unwrap. An adapter for an
// external KMS implements the same two calls.
type KEK interface {
	// ID names the KEK; it is stored beside every key it wrapped.
	ID() string
	Wrap(dek, ad []byte) ([]byte, error)
	Unwrap(wrapped, ad []byte) ([]byte, error)
}

// aesKEK is a KEK of 32 bytes held in this process (from the database or
// a key file): AES-256-GCM, a random nonce before the ciphertext.
type aesKEK struct {
	id   string
	aead cipher.AEAD
}

func newAESKEK(id string, key []byte) (*aesKEK, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key %s: %w", id, err)
	}
	return &aesKEK{id: id, aead: aead}, nil
}

func (k *aesKEK) ID() string { return k.id }

func (k *aesKEK) Wrap(dek, ad []byte) ([]byte, error) { return seal(k.aead, dek, ad) }

func (k *aesKEK) Unwrap(wrapped, ad []byte) ([]byte, error) { return open(k.aead, wrapped, ad) }

// newAEAD is AES-256-GCM under key (32 bytes).
func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("a key is 32 bytes, not %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts plain under aead with a fresh random nonce, which it puts
// before the ciphertext.
func seal(aead cipher.AEAD, plain, ad []byte) ([]byte, error) {
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, plain, ad), nil
}

var errOpen = errors.New("the ciphertext does not open under its key (corrupted, or bound to another place)")

func open(aead cipher.AEAD, box, ad []byte) ([]byte, error) {
	if len(box) < aead.NonceSize()+aead.Overhead() {
		return nil, errOpen
	}
	plain, err := aead.Open(nil, box[:aead.NonceSize()], box[aead.NonceSize():], ad)
	if err != nil {
		return nil, errOpen
	}
	return plain, nil
}

// FileKEK reads a key-encryption key from a file holding 32 random bytes,
// base64- or hex-encoded (`openssl rand -base64 32`). Its ID is
// "file-" and the first 16 hex digits of the key's SHA-256: a file with
// another key is another KEK.
func FileKEK(path string) (KEK, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("key-encryption key file: %w", err)
	}
	text := strings.TrimSpace(string(raw))
	var key []byte
	if k, err := hex.DecodeString(text); err == nil && len(k) == 32 {
		key = k
	} else if k, err := base64.StdEncoding.DecodeString(text); err == nil && len(k) == 32 {
		key = k
	} else {
		return nil, fmt.Errorf("key-encryption key file %s: want 32 bytes, base64- or hex-encoded (openssl rand -base64 32)", path)
	}
	sum := sha256.Sum256(key)
	return newAESKEK("file-"+hex.EncodeToString(sum[:8]), key)
}

// KEKs are the key-encryption keys a process knows: the current one wraps
// new data keys; any of them unwraps (a rotation re-wraps from the old to
// the new). Load fetches those it lacks.
type KEKs struct {
	mu       sync.RWMutex
	current  KEK
	byID     map[string]KEK
	loadedAt time.Time
	// load returns every KEK the source knows and the current one's ID.
	load func() ([]KEK, string, error)
}

// NewKEKs returns a set whose keys come from load, called at the first
// use and again when a data key names a KEK the set lacks.
func NewKEKs(load func() ([]KEK, string, error)) *KEKs {
	return &KEKs{load: load}
}

// StaticKEKs is a set of fixed keys, the first the current one (tests,
// tools).
func StaticKEKs(current KEK, others ...KEK) *KEKs {
	all := append([]KEK{current}, others...)
	return NewKEKs(func() ([]KEK, string, error) { return all, current.ID(), nil })
}

func (k *KEKs) reload() error {
	all, cur, err := k.load()
	if err != nil {
		return err
	}
	byID := make(map[string]KEK, len(all))
	for _, x := range all {
		byID[x.ID()] = x
	}
	if byID[cur] == nil {
		return fmt.Errorf("the current key-encryption key %q is not among those loaded", cur)
	}
	k.mu.Lock()
	k.current, k.byID, k.loadedAt = byID[cur], byID, time.Now()
	k.mu.Unlock()
	return nil
}

// currentFor is how long a process wraps new keys with the current KEK it
// read before it reads which is current again: a rotation deletes a KEK
// only longer than this after it stopped being current (RotateOptions).
const currentFor = time.Minute

// Current is the KEK that wraps new data keys.
func (k *KEKs) Current() (KEK, error) {
	k.mu.RLock()
	cur, at := k.current, k.loadedAt
	k.mu.RUnlock()
	if cur != nil && time.Since(at) < currentFor {
		return cur, nil
	}
	if err := k.reload(); err != nil {
		return nil, err
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.current, nil
}

// Reload reads the keys again (after a rotation made another current).
func (k *KEKs) Reload() error { return k.reload() }

// Get returns the KEK id, loading the set again once when it lacks it.
func (k *KEKs) Get(id string) (KEK, error) {
	k.mu.RLock()
	x := k.byID[id]
	k.mu.RUnlock()
	if x != nil {
		return x, nil
	}
	if err := k.reload(); err != nil {
		return nil, err
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	if x = k.byID[id]; x == nil {
		return nil, fmt.Errorf("key-encryption key %q is unknown to this process (a key file of another deployment, or one retired by a rotation that did not finish)", id)
	}
	return x, nil
}
