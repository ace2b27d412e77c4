// Package money is the amount-and-currency value every module shares: an
// integer number of minor units (cents for EUR) of one ISO-4217-shaped
// currency code, with arithmetic that refuses to wrap around. It lives in
// the engine's domain, not in a module, so that a second module that deals
// in money (fulfilment's payments, a team's billing) imports it instead of
// copying it, and two modules' amounts are the same type and the same JSON
// ({"amount":123,"currency":"EUR"}). Like its parent it imports the
// standard library and strata's domain package only.
package money
