package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// execMainEnv makes the test binary run main() instead of the tests, so a
// test can run kvroute as a process of its own (signals reach it alone).
const execMainEnv = "KVROUTE_TEST_EXEC_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(execMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// sighupReady is the line GODEBUG=inittrace=1 prints once package sighup
// has initialised: from then on the process catches SIGHUP. (Before it, the
// Go runtime itself is starting, and no Go program can catch a signal.)
const sighupReady = "init github.com/kvroute/kvroute/cmd/kvroute/internal/sighup "

// A SIGHUP that arrives while kvroute starts is a reload request like any
// other: the process keeps running, serves, and stops cleanly on SIGTERM.
func TestSIGHUPDuringStartupDoesNotEndServe(t *testing.T) {
	path := unreachableConfig(t)
	for attempt := range 3 {
		cmd := exec.Command(os.Args[0], "serve", "--config", path)
		cmd.Env = append(os.Environ(), execMainEnv+"=1", "GODEBUG=inittrace=1")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready, serving := make(chan struct{}), make(chan struct{})
		scanned := make(chan struct{})
		go func() {
			defer close(scanned)
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				var rec struct{ Msg string }
				switch {
				case strings.HasPrefix(sc.Text(), sighupReady):
					close(ready)
				case json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "admin listening":
					close(serving)
				}
			}
		}()
		exited := make(chan error, 1)
		go func() { <-scanned; exited <- cmd.Wait() }()
		select {
		case <-ready:
		case err := <-exited:
			t.Fatalf("kvroute exited before package sighup initialised: %v", err)
		}
		// SIGHUP every 200 µs from the moment the runtime can take it until
		// kvroute serves, then a few more.
		sent, after := 0, -1
		for after < 20 {
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				break
			}
			sent++
			select {
			case <-serving:
				serving = nil
				after = 0
			case err := <-exited:
				t.Fatalf("attempt %d: kvroute exited after %d SIGHUPs during start-up: %v", attempt, sent, err)
			default:
			}
			if after >= 0 {
				after++
			}
			time.Sleep(200 * time.Microsecond)
		}
		select {
		case err := <-exited:
			t.Fatalf("attempt %d: kvroute exited after %d SIGHUPs: %v", attempt, sent, err)
		case <-time.After(200 * time.Millisecond):
		}
		t.Logf("attempt %d: %d SIGHUPs sent, %d of them after kvroute served", attempt, sent, after)
		cmd.Process.Signal(syscall.SIGTERM)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			if err != nil {
				t.Fatalf("attempt %d: exit after SIGTERM: %v", attempt, err)
			}
		case <-ctx.Done():
			cmd.Process.Kill()
			t.Fatalf("attempt %d: SIGTERM did not stop kvroute", attempt)
		}
		cancel()
	}
}
