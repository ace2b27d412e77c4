// Package commandapi is the command HTTP API: gorilla/mux routes that turn
// strict JSON requests into commands, run them through commands.Handler
// with If-Match and Idempotency-Key semantics, and answer in the API's one
// success and error shapes.
package commandapi
