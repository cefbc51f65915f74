package routebench

import "syscall"

// childProcAttr puts the child in its own process group and asks the kernel
// to SIGKILL it when the thread that started it dies (prctl PR_SET_PDEATHSIG),
// so a crashed or killed demo leaves no emulators behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
