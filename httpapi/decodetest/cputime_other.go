//go:build !linux

package decodetest

import "time"

// threadCPU is not available here: measure falls back to wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
