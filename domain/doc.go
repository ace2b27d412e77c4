// Package domain holds the vocabulary every other package shares: tenants,
// entity IDs and error kinds here, the event envelope in domain/event and
// money (an amount and its currency) in domain/money. A module's own domain
// may import all of them. It imports the standard library only; nothing of
// infrastructure may leak in here.
package domain
