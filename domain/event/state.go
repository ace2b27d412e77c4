package event

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// An aggregate's state kept beside its stream (a snapshot, issue 31 §4)
// holds whatever its events held, personal fields opened. A stream with a
// data subject has its state sealed whole with the subject's key, so that
// forgetting the subject shreds the state as it shreds the events.

// stateBinding binds a sealed state to its stream.
func stateBinding(tenant, stream string) Binding {
	return Binding{Tenant: tenant, Stream: stream, Type: "$state", Field: "state"}
}

// The stored forms of a state: plain, or sealed (an envelope).
const (
	statePlain  = 'p'
	stateSealed = 's'
)

// SealState returns the stored form of an aggregate's state: sealed with
// keyID, the stream's data subject's key, or plain when keyID is empty.
func (r *Registry) SealState(ctx context.Context, tenant, stream, keyID string, state []byte) ([]byte, error) {
	if keyID == "" {
		return append([]byte{statePlain}, state...), nil
	}
	if r.protector == nil {
		return nil, errors.New("seal state: no protector")
	}
	env, err := r.protector.Seal(ctx, keyID, stateBinding(tenant, stream), state)
	if err != nil {
		return nil, fmt.Errorf("seal state: %w", err)
	}
	return append([]byte{stateSealed}, env.String()...), nil
}

// OpenState returns a state stored by SealState and the ID of the key
// that sealed it ("" for a plain one). ErrShredded: that key was
// destroyed.
func (r *Registry) OpenState(ctx context.Context, tenant, stream string, stored []byte) (state []byte, keyID string, err error) {
	if len(stored) == 0 {
		return nil, "", errors.New("open state: empty")
	}
	switch stored[0] {
	case statePlain:
		return stored[1:], "", nil
	case stateSealed:
		env, err := ParseEnvelope(string(stored[1:]))
		if err != nil {
			return nil, "", fmt.Errorf("open state: %w", err)
		}
		if r.protector == nil {
			return nil, env.KeyID, errors.New("open state: no protector")
		}
		state, err := r.protector.Open(ctx, env, stateBinding(tenant, stream))
		return state, env.KeyID, err
	}
	return nil, "", fmt.Errorf("open state: unknown form %q", stored[0])
}

// Fingerprint names the registry's codecs and their schema versions: a
// state decoded with one set of codecs and upcasters is not the state
// another would give, so a snapshot keeps the fingerprint it was taken
// under and is ignored under another.
func (r *Registry) Fingerprint() string {
	var b strings.Builder
	for _, t := range r.Types() {
		fmt.Fprintf(&b, "%s@%d\n", t, r.byType[t].Version)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}
