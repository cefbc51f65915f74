package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvroute/kvroute/cmd/kvroute/internal/sighup"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/server"
)

// runServe loads the config, assembles kvroute and runs until ctx ends.
func runServe(ctx context.Context, args []string, io stdio) error {
	// SIGHUP asks for a reload; it is caught from the start of the process
	// (package sighup), and one sent while kvroute starts is served once it
	// runs.
	hup := sighup.Requests()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.err)
	path := fs.String("config", "kvroute.yaml", "YAML config file (see docs/CONFIG.md)")
	watch := fs.Duration("watch-interval", defaultWatchInterval, "reload the config file when its content changes, checked this often (0: only on SIGHUP)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *watch < 0 {
		fmt.Fprintln(io.err, "serve: --watch-interval must not be negative")
		return errUsage
	}
	data, err := config.ReadFile(*path)
	if err != nil {
		return fmt.Errorf("config %s: %w", *path, err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return fmt.Errorf("config %s:\n%w", *path, err)
	}
	log := newLogger(cfg.Log, io.err)
	srv, err := server.New(server.Options{Config: cfg, BaseDir: filepath.Dir(*path), Logger: log})
	if err != nil {
		return err
	}
	log.Info("config loaded", "config", *path, "watch_interval", watch.String())
	trigger := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the config", "config", *path)
				select {
				case trigger <- struct{}{}:
				default:
				}
			}
		}
	}()
	go srv.WatchConfig(ctx, *path, data, *watch, trigger)
	return srv.Run(ctx)
}

// defaultWatchInterval is how often serve checks its config file for a
// change by default.
const defaultWatchInterval = 5 * time.Second

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(c.Level)))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)) // durations as 1.5s already
	}
	opts.ReplaceAttr = durationsAsText
	return slog.New(slog.NewJSONHandler(w, opts))
}

// durationsAsText renders a time.Duration attribute as "100ms" rather than
// the JSON handler's integer nanoseconds, which a reader takes for a count.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
