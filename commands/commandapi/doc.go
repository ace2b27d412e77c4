// Package commandapi is the generic command HTTP executor: a module
// registers its routes (Register with a Resource and Routes), each turning a
// strict JSON request into a command that runs through a
// commands.Executor with If-Match and Idempotency-Key semantics, answered
// in the API's one success and error shapes. It knows no aggregate: the
// response's ID field and Location come from the Resource.
package commandapi
