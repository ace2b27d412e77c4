// Package payhttp is the http payment provider: a client of the capture API
// documented in docs/fulfilment.md (POST /v1/captures with an
// Idempotency-Key, POST /v1/captures/{key}/void), and the process.Port the
// fulfilment process's capture and void intents go through. Every call has
// its own timeout; a 5xx, a timeout or a lost connection is retryable (the
// runtime retries with the same key, so the provider applies it once); a
// decline, or a capture refused because its key was voided, is a definite
// *process.Rejected.
//
// It imports the standard library, domain and commands/process.
package payhttp
