// Package decodetest checks request decoders against httpapi.DecodeStrict's
// contract, for fuzz targets and table tests: hostile seed inputs (Seeds),
// and Check, which asserts properties of every outcome rather than only
// "no panic": rejections are 400 *httpapi.Error values, accepted bodies
// have exact keys only, agree with encoding/json and survive a round trip,
// and no decode costs more than Budget of CPU. It imports httpapi
// and the standard library; only tests import it.
package decodetest
