package harness

import "syscall"

// setParentDeathSignal makes the kernel SIGKILL a strata process when the
// thread that forked it dies, so that a harness killed half-way leaves no
// servers behind.
func setParentDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
