// Package personal keeps the keys of personal data per data subject
// (ARCHITECTURE decision 16; docs/personal-data.md).
//
// A module declares the personal fields of its events (event.Personal);
// the Keyring, an event.Protector, seals each of them with a data key of
// its subject (AES-256-GCM, the tenant, stream, event type and field bound
// into the associated data) before the event reaches the log, and opens
// them on every read. Data keys live per tenant in the table subject_keys,
// wrapped by a key-encryption key (KEK): one held in the control plane's
// database by default (key_encryption_keys), or a local key file
// (STRATA_KEK_FILE). A data key never leaves the process that unwraps it;
// Rotate re-wraps every data key under a new KEK without touching an event.
//
// Destroying a subject's data key (Destroy) shreds every sealed field of
// that subject wherever a copy of the event went: the log, exports, the
// broker. Readers then decode those fields to the tombstones the module
// declared.
package personal
