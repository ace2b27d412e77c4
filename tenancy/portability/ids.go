package portability

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/strata-es/strata/domain"
	"github.com/strata-es/strata/domain/event"
)

// importNamespace is the UUIDv5 namespace of event IDs derived by an
// import. Never change it: a rerun of an import must derive the IDs it
// derived before (resumption compares them).
var importNamespace = uuid.MustParse("6b1f3c1e-2a7d-5c0e-9f4b-8d2e1a0c7b35")

// ImportedEventID is the ID an import gives, under tenant, to the event
// whose ID in an archive of another tenant is id: UUIDv5 of
// "<tenant>/<id>" in a fixed namespace. A copy under a new tenant is a
// new event: it gets an ID of its own (the relay's message ID is the
// event ID, and JetStream's de-duplication dropped the copies that kept
// theirs: issue 29, finding 6), derived, so that every run of the same
// import gives the same IDs. An import under the archive's own tenant
// keeps the archive's IDs: the events are the same events, restored.
func ImportedEventID(tenant domain.TenantID, id uuid.UUID) uuid.UUID {
	return uuid.NewSHA1(importNamespace, []byte(string(tenant)+"/"+id.String()))
}

// ids maps the archive's event IDs to the target's.
type ids struct {
	tenant domain.TenantID
	derive bool // the target is not the archive's tenant
	p      *plan
}

func (m ids) of(id uuid.UUID) uuid.UUID {
	if !m.derive {
		return id
	}
	return ImportedEventID(m.tenant, id)
}

// metadata returns the event's metadata for the target: as the archive
// has it, except that a causation_id or correlation_id naming an event of
// the archive names that event's new ID (a reference to anything else,
// a command or a request, is kept).
func (m ids) metadata(raw json.RawMessage, meta event.Metadata) (json.RawMessage, error) {
	if !m.derive {
		return raw, nil
	}
	changed := false
	for _, ref := range []*string{&meta.CausationID, &meta.CorrelationID} {
		id, err := uuid.Parse(*ref)
		if err != nil || id.String() != *ref || !m.p.has(id) {
			continue
		}
		*ref, changed = m.of(id).String(), true
	}
	if !changed {
		return raw, nil
	}
	return json.Marshal(meta)
}

// contentDigest identifies an archive's content: the SHA-256 of its
// manifest's Content (which holds every file's SHA-256).
func contentDigest(m Manifest) string {
	sum := sha256.Sum256(m.Content())
	return hex.EncodeToString(sum[:])
}
