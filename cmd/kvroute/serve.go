package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/server"
)

// runServe loads the config, assembles kvroute and runs until ctx ends.
func runServe(ctx context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.err)
	path := fs.String("config", "kvroute.yaml", "YAML config file (see docs/CONFIG.md)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return fmt.Errorf("config %s:\n%w", *path, err)
	}
	log := newLogger(cfg.Log, io.err)
	srv, err := server.New(server.Options{Config: cfg, BaseDir: filepath.Dir(*path), Logger: log})
	if err != nil {
		return err
	}
	log.Info("config loaded", "config", *path)
	return srv.Run(ctx)
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
