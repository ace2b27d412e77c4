package subjects

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/strata-es/strata/domain/event"
	"github.com/strata-es/strata/projections/relay"
)

// brokerFindings checks what the broker holds of the tenant (Config.Broker)
// as Verify checks the log: no message naming the subject in plaintext
// (its payload or its stream), and none of the subject's streams holding
// a declared field in plaintext (history published before the declaration).
func (e *Eraser) brokerFindings(ctx context.Context, tenant, subject string, streams []string) ([]Finding, error) {
	var named, plain int64
	err := e.cfg.Broker(ctx, tenant, func(m relay.Held) error {
		if strings.Contains(m.Stream, subject) || bytes.Contains(m.Payload, []byte(subject)) {
			named++
		}
		if e.cfg.Registry != nil && slices.Contains(streams, m.Stream) && len(event.Unsealed(m.Payload, e.cfg.Registry.Personal(m.Type))) > 0 {
			plain++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Finding
	if named > 0 {
		out = append(out, Finding{Store: "broker", Count: named, What: "messages the broker keeps naming the subject's ID in plaintext"})
	}
	if plain > 0 {
		out = append(out, Finding{Store: "broker_fields", Count: plain, What: "messages of the subject's streams holding declared personal fields in plaintext"})
	}
	return out, nil
}
