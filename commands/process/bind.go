package process

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/strata-es/strata/commands"
	"github.com/strata-es/strata/domain"
)

// Bind makes a CommandFunc of a command type C on aggregates of type A: the
// payload is decoded into C (unknown fields refused) and executed by ex
// under the idempotency key, so that a step dispatched again after a crash
// replays the stored outcome instead of deciding twice. A rejection stored
// under the key comes back as the same definite refusal.
//
// A module binds every command its process issues:
//
//	process.Bind[*inventory.Item, cmdinventory.Reserve](items)
func Bind[A any, C commands.Command[A]](ex commands.Executor[A]) CommandFunc {
	return func(ctx context.Context, tenant domain.TenantID, payload json.RawMessage, key string) (json.RawMessage, error) {
		var cmd C
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cmd); err != nil {
			return nil, fmt.Errorf("decode command payload: %w", err)
		}
		sum := sha256.Sum256(append([]byte(cmd.Name()+"\x00"), payload...))
		idem := &commands.Idempotency{
			Key:         key,
			RequestHash: hex.EncodeToString(sum[:]),
			Respond:     renderOutcome,
		}
		res, err := ex.Handle(domain.NewContext(ctx, tenant), cmd, commands.Options{Idempotency: idem})
		if err != nil {
			if IsDefinite(err) {
				return nil, &Rejected{Reason: err.Error()}
			}
			return nil, err
		}
		if res.Replayed != nil {
			return replayedOutcome(res.Replayed)
		}
		return commandResult(res)
	}
}

// storedOutcome is what an outgoing command's idempotency record holds.
type storedOutcome struct {
	OK       bool   `json:"ok"`
	Rejected string `json:"rejected,omitempty"`
	ID       string `json:"id,omitempty"`
	Version  int64  `json:"version,omitempty"`
	Position string `json:"position,omitempty"`
}

func renderOutcome(res commands.Result, err error) ([]byte, error) {
	if err != nil {
		return json.Marshal(storedOutcome{Rejected: err.Error()})
	}
	return json.Marshal(storedOutcome{OK: true, ID: res.ID, Version: res.Version, Position: res.Position.String()})
}

func replayedOutcome(stored []byte) (json.RawMessage, error) {
	var o storedOutcome
	if err := json.Unmarshal(stored, &o); err != nil {
		return nil, fmt.Errorf("stored outcome under the step's key is not a process outcome: %w", err)
	}
	if !o.OK {
		if o.Rejected == "" {
			return nil, errors.New("stored outcome under the step's key is empty")
		}
		return nil, &Rejected{Reason: o.Rejected}
	}
	return json.Marshal(o)
}

func commandResult(res commands.Result) (json.RawMessage, error) {
	return json.Marshal(storedOutcome{OK: true, ID: res.ID, Version: res.Version, Position: res.Position.String()})
}
