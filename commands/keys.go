package commands

import (
	"strings"

	"github.com/strata-es/strata/domain/decision"
)

// EngineKeyPrefix starts every idempotency key the engine itself executes
// commands under: a process manager's step runs with
// "pm:<process>:<instance>:<step>" (process.StepKey), deterministic so that
// a re-dispatch replays the stored outcome. Keys are per tenant, so a
// tenant's user who sent such a key first would make the engine's step
// replay the user's outcome (issue 29, finding 11). The namespace is
// therefore the engine's: the HTTP command API refuses a user key that
// starts with it (IsEngineKey), and the engine's own keys keep their form,
// so a step issued before an upgrade still finds its record after it. It
// is decision.KeyPrefix, where the key's form is defined (decision.StepKey)
// for the process managers' pure code, which may not import this package.
const EngineKeyPrefix = decision.KeyPrefix

// IsEngineKey reports whether key is in the engine's reserved namespace.
func IsEngineKey(key string) bool { return strings.HasPrefix(key, EngineKeyPrefix) }
