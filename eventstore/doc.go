// Package eventstore is the event store port: the interfaces every store
// adapter implements (Store for tenant-scoped appends and reads, Log for the
// projector's cross-tenant global log) and the errors they return. The
// adapters live in subpackages (postgres, esdb) and all pass the shared
// conformance suite in storetest. This package imports only domain.
package eventstore
