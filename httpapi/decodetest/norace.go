//go:build !race

package decodetest

const raceEnabled = false
