package decodetest

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time (user and system) the calling OS thread
// has used.
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1 // RUSAGE_THREAD, the same on every Linux
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
