//go:build !linux

package harness

import "syscall"

// setParentDeathSignal is a no-op outside Linux: there the supervisor's
// Stop is what ends the strata processes.
func setParentDeathSignal(*syscall.SysProcAttr) {}
