package process

import (
	"encoding/json"
	"fmt"

	"github.com/strata-es/strata/domain/event"
)

// An instance on a data subject's streams is redacted in place when the
// subject is erased (tenancy/subjects, step redact): its declared personal
// fields hold their tombstones and its free text is cleared, and
// process_instances.erased_as records the subject's pseudonym. A decision,
// an outcome or a parking committed after that (a step that was in flight,
// a key still cached in the process that opened a field) is redacted the
// same way as the runtime writes it, under the instance's lock, so the
// erasure holds whatever the process does next.

// freeText is s as the instance may keep it: ErasedText once a subject's
// erasure redacted the instance, when there is any.
func (inst *instanceRow) freeText(s string) string {
	if inst.erasedAs == "" || s == "" {
		return s
	}
	return event.ErasedText
}

// redact returns doc with the process's declared personal fields
// replaced by their tombstones when the instance was redacted.
func (w *writer) redact(inst *instanceRow, doc json.RawMessage) (json.RawMessage, error) {
	if inst.erasedAs == "" {
		return doc, nil
	}
	out, _, err := event.Redact(doc, w.m.Personal(), inst.erasedAs)
	return out, err
}

// redactDecision redacts the state and the step payloads of d for a
// redacted instance.
func (w *writer) redactDecision(inst *instanceRow, d *decided) error {
	if inst.erasedAs == "" {
		return nil
	}
	var err error
	if d.State, err = w.redact(inst, d.State); err != nil {
		return fmt.Errorf("redact the state of an erased subject's instance: %w", err)
	}
	for i := range d.Steps {
		if d.Steps[i].Payload, err = w.redact(inst, d.Steps[i].Payload); err != nil {
			return fmt.Errorf("redact step %s of an erased subject's instance: %w", d.Steps[i].Key, err)
		}
	}
	return nil
}
