package personal

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/strata-es/strata/db"
	"github.com/strata-es/strata/domain/event"
)

// Batcher runs a pipelined batch: a pool, a connection or a transaction.
// A batch outside a transaction runs as one implicit transaction, so the
// tenant's set_config at its head stays local to it.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Config tunes a Keyring.
type Config struct {
	// Keys bounds the data keys kept unwrapped in memory, and the subjects'
	// key IDs (default 4096 each: a few MiB at most).
	Keys int
	// Timeout bounds a read of the key table on a cache miss made by a
	// decode, which has no context of its own (default 10s).
	Timeout time.Duration
}

// Keyring is the event.Protector of one database: its tenants' data keys
// in subject_keys, wrapped by keks. It is safe for concurrent use.
type Keyring struct {
	db    Batcher
	keks  *KEKs
	cfg   Config
	cache *keyCache
}

var _ event.Protector = (*Keyring)(nil)

// NewKeyring returns the keyring of the database behind b (it must run as
// a role that may read and insert subject_keys: strata_app, strata_projector
// or the owner).
func NewKeyring(b Batcher, keks *KEKs, cfg Config) *Keyring {
	if cfg.Keys <= 0 {
		cfg.Keys = 4096
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	return &Keyring{db: b, keks: keks, cfg: cfg, cache: newKeyCache(cfg.Keys)}
}

// SubjectHash is how subject_keys names a subject: a hash of the tenant
// and the subject's ID, never the ID itself.
func SubjectHash(tenant, subject string) string {
	sum := sha256.Sum256([]byte("strata-subject/v1\x00" + tenant + "\x00" + subject))
	return hex.EncodeToString(sum[:])
}

// wrapAD binds a wrapped data key to its tenant and key ID.
func wrapAD(tenant, keyID string) []byte {
	return []byte("strata-dek/v1\x00" + tenant + "\x00" + keyID)
}

// sealAD binds a sealed field to its place.
func sealAD(keyID string, b event.Binding) []byte {
	return []byte("strata-field/v1\x00" + b.Tenant + "\x00" + b.Stream + "\x00" + b.Type + "\x00" + b.Field + "\x00" + keyID)
}

// SubjectKey implements event.Protector: the subject's key, created (and
// committed) on first use, before any event sealed with it can be.
func (k *Keyring) SubjectKey(ctx context.Context, tenant, subject string) (string, error) {
	hash := SubjectHash(tenant, subject)
	if id, ok := k.cache.subject(tenant, hash); ok {
		return id, nil
	}
	id, err := k.ensureSubject(ctx, tenant, hash)
	if err != nil {
		return "", err
	}
	k.cache.putSubject(tenant, hash, id)
	return id, nil
}

// ensureSubject returns the subject's key, unwrapped into the cache, in
// one round trip: a new key is offered (an insert that does nothing when
// the subject has one) and the subject's key read back, in one pipeline,
// hence one implicit transaction that commits before the caller seals
// anything with it. Concurrent first uses agree: the insert waits for a
// concurrent one and does nothing, and the read, a statement of its own,
// sees the winner.
func (k *Keyring) ensureSubject(ctx context.Context, tenant, hash string) (string, error) {
	dek := make([]byte, 32)
	raw := make([]byte, 16)
	if _, err := rand.Read(dek); err != nil {
		return "", err
	}
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	offered := hex.EncodeToString(raw)
	kek, err := k.keks.Current()
	if err != nil {
		return "", err
	}
	wrappedNew, err := kek.Wrap(dek, wrapAD(tenant, offered))
	clear(dek)
	if err != nil {
		return "", fmt.Errorf("wrap a data key: %w", err)
	}
	var id, kekID string
	var wrapped []byte
	err = k.inTenant(ctx, tenant, func(b *pgx.Batch) {
		b.Queue(`INSERT INTO subject_keys (tenant_id, key_id, subject_hash, kek_id, wrapped) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant_id, subject_hash) DO NOTHING`, tenant, offered, hash, kek.ID(), wrappedNew)
		b.Queue(`SELECT key_id, kek_id, wrapped FROM subject_keys WHERE tenant_id = $1 AND subject_hash = $2`, tenant, hash).
			QueryRow(func(row pgx.Row) error { return row.Scan(&id, &kekID, &wrapped) })
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", errors.New("store a data key: the subject has no key after its insert")
	}
	if err != nil {
		return "", fmt.Errorf("the subject's data key: %w", err)
	}
	if _, err := k.unwrap(tenant, id, kekID, wrapped); err != nil {
		return "", err
	}
	return id, nil
}

// Seal implements event.Protector.
func (k *Keyring) Seal(ctx context.Context, keyID string, b event.Binding, value []byte) (event.Envelope, error) {
	aead, err := k.key(ctx, b.Tenant, keyID)
	if err != nil {
		return event.Envelope{}, err
	}
	box, err := seal(aead, value, sealAD(keyID, b))
	if err != nil {
		return event.Envelope{}, err
	}
	return event.Envelope{KeyID: keyID, Box: box}, nil
}

// Open implements event.Protector.
func (k *Keyring) Open(ctx context.Context, e event.Envelope, b event.Binding) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.Timeout)
	defer cancel()
	aead, err := k.key(ctx, b.Tenant, e.KeyID)
	if err != nil {
		return nil, err
	}
	return open(aead, e.Box, sealAD(e.KeyID, b))
}

// key returns the unwrapped key keyID of tenant: event.ErrShredded when
// it was destroyed.
func (k *Keyring) key(ctx context.Context, tenant, keyID string) (cipher.AEAD, error) {
	if aead, shredded, ok := k.cache.key(tenant, keyID); ok {
		if shredded {
			return nil, event.ErrShredded
		}
		return aead, nil
	}
	var kekID string
	var wrapped []byte
	found := false
	err := k.inTenant(ctx, tenant, func(b *pgx.Batch) {
		b.Queue(`SELECT kek_id, wrapped FROM subject_keys WHERE tenant_id = $1 AND key_id = $2`, tenant, keyID).
			QueryRow(func(row pgx.Row) error {
				err := row.Scan(&kekID, &wrapped)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				found = err == nil
				return err
			})
	})
	if err != nil {
		return nil, fmt.Errorf("read data key: %w", err)
	}
	if !found {
		// Keys are committed before any event sealed with them, so an
		// envelope whose key is missing names a destroyed key.
		k.cache.putKey(tenant, keyID, nil)
		return nil, event.ErrShredded
	}
	return k.unwrap(tenant, keyID, kekID, wrapped)
}

func (k *Keyring) unwrap(tenant, keyID, kekID string, wrapped []byte) (cipher.AEAD, error) {
	kek, err := k.keks.Get(kekID)
	if err != nil {
		return nil, err
	}
	dek, err := kek.Unwrap(wrapped, wrapAD(tenant, keyID))
	if err != nil {
		return nil, fmt.Errorf("unwrap data key %s: %w", keyID, err)
	}
	aead, err := newAEAD(dek)
	clear(dek)
	if err != nil {
		return nil, err
	}
	k.cache.putKey(tenant, keyID, aead)
	return aead, nil
}

// Forget drops what the keyring holds of tenant's subject and of its key
// keyID: after a Destroy by any process, the next use finds the key gone.
func (k *Keyring) Forget(tenant, subject, keyID string) {
	k.cache.forget(tenant, SubjectHash(tenant, subject), keyID)
}

func (k *Keyring) inTenant(ctx context.Context, tenant string, queue func(b *pgx.Batch)) error {
	b := &pgx.Batch{}
	b.Queue(db.SetTenantSQL, tenant)
	queue(b)
	return k.db.SendBatch(ctx, b).Close()
}

// CopyKeys copies tenant's data keys keyIDs from the database of src to
// the transaction tx on the database of dst (under the tenant, as a role
// that may insert subject_keys), re-wrapped by dst's current KEK, where dst
// lacks them: a tenant move copies the keys of the events it copies in the
// transaction that writes them, so that no reader of the target ever sees
// a sealed field whose key is not there (which reads as shredded). A key
// src no longer has was destroyed: it is not copied, and the target reads
// its fields as shredded too. It returns how many keys it inserted.
func CopyKeys(ctx context.Context, src, dst *Keyring, tx pgx.Tx, tenant string, keyIDs []string) (int64, error) {
	if len(keyIDs) == 0 {
		return 0, nil
	}
	type row struct {
		id, hash, kek string
		wrapped       []byte
	}
	var rows []row
	err := src.inTenant(ctx, tenant, func(b *pgx.Batch) {
		b.Queue(`SELECT key_id, subject_hash, kek_id, wrapped FROM subject_keys WHERE tenant_id = $1 AND key_id = ANY($2)`, tenant, keyIDs).
			Query(func(rs pgx.Rows) error {
				for rs.Next() {
					var r row
					if err := rs.Scan(&r.id, &r.hash, &r.kek, &r.wrapped); err != nil {
						return err
					}
					rows = append(rows, r)
				}
				return rs.Err()
			})
	})
	if err != nil {
		return 0, fmt.Errorf("read the data keys to copy: %w", err)
	}
	to, err := dst.keks.Current()
	if err != nil {
		return 0, err
	}
	ids, hashes, keks := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	wrapped := make([][]byte, len(rows))
	for i, r := range rows {
		w, err := rewrap(src.keks, to, tenant, r.id, r.kek, r.wrapped)
		if err != nil {
			return 0, err
		}
		ids[i], hashes[i], keks[i], wrapped[i] = r.id, r.hash, to.ID(), w
	}
	tag, err := tx.Exec(ctx, `INSERT INTO subject_keys (tenant_id, key_id, subject_hash, kek_id, wrapped)
SELECT $1, k, h, e, w FROM unnest($2::text[], $3::text[], $4::text[], $5::bytea[]) AS x(k, h, e, w)
ON CONFLICT DO NOTHING`, tenant, ids, hashes, keks, wrapped)
	if err != nil {
		return 0, fmt.Errorf("write the copied data keys: %w", err)
	}
	return tag.RowsAffected(), nil
}
