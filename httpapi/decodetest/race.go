//go:build race

package decodetest

// raceEnabled: the race detector slows decoding down ten- to twentyfold.
const raceEnabled = true
