package pgembed

import "syscall"

// setParentDeathSignal arranges for sig to be sent to the child when the
// forking thread dies. Go applies it after switching credentials (which
// would otherwise clear it), so it also works for the postgres OS user.
func setParentDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
