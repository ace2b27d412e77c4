//go:build !linux

package pgembed

import "syscall"

// setParentDeathSignal is a no-op outside Linux: there a Child-mode server
// is stopped by Stop but does not die with a killed parent.
func setParentDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
