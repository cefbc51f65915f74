//go:build !linux

package routebench

import "syscall"

// childProcAttr is the default elsewhere: a terminal's Ctrl-C then reaches
// the children too, which exit on SIGINT as the demo does.
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
