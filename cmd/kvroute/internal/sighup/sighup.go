// Package sighup catches SIGHUP from the moment the process starts. Go
// initialises packages in import-path order as soon as their imports are
// ready, so this one (which needs only os/signal) runs before the heavy
// packages of kvroute serve (gRPC, protobuf registries, tokenizers); until
// a handler is installed a SIGHUP ends the process, and a tool that reloads
// every process it touched would end a kvroute still starting.
package sighup

import (
	"os"
	"os/signal"
	"syscall"
)

var c = make(chan os.Signal, 1)

func init() { signal.Notify(c, syscall.SIGHUP) }

// Requests is where SIGHUPs arrive, those sent during start-up included
// (at most one is kept until read).
func Requests() <-chan os.Signal { return c }

// Release gives SIGHUP back its default action (end the process), for
// the subcommands that are not a server.
func Release() {
	signal.Stop(c)
	signal.Reset(syscall.SIGHUP)
}
