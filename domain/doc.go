// Package domain holds strata's business rules and the vocabulary every other
// package shares: tenants, error kinds and (in subpackages) the order
// aggregate and the event envelope. It imports the standard library only;
// nothing of infrastructure may leak in here.
package domain
