// Package paysim is strata's payment-provider simulator: a real HTTP
// server on loopback (started in-process by tests and by the chaos
// harness) speaking the capture API the http payment provider is written
// against (docs/fulfilment.md), keeping a ledger of every capture, void and
// decline by idempotency key, and misbehaving on request: slow answers,
// 5xx, requests held past the client's timeout, declines by rate or by
// order, and captures recorded whose response is then dropped (the
// connection is closed without an answer). Faults are decided from a seed
// and the key's attempt number, so a run is deterministic whatever the
// interleaving of concurrent requests.
//
// It imports the standard library only: it knows no module.
package paysim
