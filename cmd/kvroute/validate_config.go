package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/server"
)

// runValidateConfig checks a config file and every pool's tokenizer and chat
// template, and prints every problem, one a line.
func runValidateConfig(_ context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("validate-config", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() { fmt.Fprintln(io.err, "usage: kvroute validate-config FILE") }
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	path := fs.Arg(0)
	cfg, err := config.Load(path)
	if err == nil {
		// What serve loads at start (tokenizers, chat templates) with the
		// same code, so ok here means serve starts.
		err = server.CheckPools(cfg, filepath.Dir(path))
	}
	if err != nil {
		fmt.Fprintf(io.err, "%s: invalid:\n", path)
		var joined interface{ Unwrap() []error }
		if errors.As(err, &joined) {
			for _, e := range joined.Unwrap() {
				fmt.Fprintf(io.err, "  %v\n", e)
			}
		} else {
			fmt.Fprintf(io.err, "  %v\n", err)
		}
		return errValidationFailed
	}
	replicas := 0
	for _, p := range cfg.Pools {
		replicas += len(p.Replicas)
	}
	fmt.Fprintf(io.out, "%s: ok (%d pools, %d replicas)\n", path, len(cfg.Pools), replicas)
	return nil
}

// errValidationFailed is returned after the problems were printed.
var errValidationFailed = errors.New("config is invalid")
