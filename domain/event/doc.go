// Package event defines what every stored event looks like (Record, Metadata,
// Position), the opaque consistency token handed to clients, and the codec
// registry that maps stable type names and schema versions to Go payloads,
// upcasting old versions on read. Standard library only.
package event
