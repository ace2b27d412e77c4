package processtest

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/strata-es/strata/commands/process"
	"github.com/strata-es/strata/domain"
)

// Answer is a fake command's or port's behaviour: what it answers one
// execution of a step for tenant under the step's idempotency key. A
// *process.Rejected (Refuse) is a definite refusal; any other error is
// transient, retried by the runtime with the same key.
type Answer func(tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error)

// Command makes the answer a process.CommandFunc.
func (a Answer) Command() process.CommandFunc {
	return func(_ context.Context, tenant domain.TenantID, payload json.RawMessage, key string) (json.RawMessage, error) {
		return a(tenant, key, payload)
	}
}

// Port makes the answer a process.Port.
func (a Answer) Port() process.Port {
	return process.PortFunc(func(_ context.Context, tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
		return a(tenant, key, payload)
	})
}

// Reply answers every execution with result's JSON (nil: no result).
func Reply(result any) Answer {
	var raw json.RawMessage
	if result != nil {
		var err error
		if raw, err = json.Marshal(result); err != nil {
			return func(domain.TenantID, string, json.RawMessage) (json.RawMessage, error) { return nil, err }
		}
	}
	return func(domain.TenantID, string, json.RawMessage) (json.RawMessage, error) { return raw, nil }
}

// Refuse answers every execution with a definite refusal for reason.
func Refuse(reason string) Answer {
	return func(domain.TenantID, string, json.RawMessage) (json.RawMessage, error) {
		return nil, &process.Rejected{Reason: reason}
	}
}

// Script answers the n-th execution (over every step and tenant) with
// answers[n], and every later one with the last: Script(Fail(err),
// Reply(x)) fails once, then succeeds.
func Script(answers ...Answer) Answer {
	var mu sync.Mutex
	n := 0
	return func(tenant domain.TenantID, key string, payload json.RawMessage) (json.RawMessage, error) {
		mu.Lock()
		a := answers[min(n, len(answers)-1)]
		n++
		mu.Unlock()
		return a(tenant, key, payload)
	}
}

// Fail answers every execution with err: a transient failure unless err
// is a definite refusal (process.IsDefinite).
func Fail(err error) Answer {
	return func(domain.TenantID, string, json.RawMessage) (json.RawMessage, error) { return nil, err }
}
