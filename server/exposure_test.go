package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/internal/logbuf"
	"github.com/kvroute/kvroute/internal/testdata"
)

// TestWarnsWhenListenersReachOtherMachinesInPlaintext starts the server with
// listeners on every interface and without TLS and reads its log: one
// warning per listener; on loopback, none.
func TestWarnsWhenListenersReachOtherMachinesInPlaintext(t *testing.T) {
	tokDir := testdata.TokenizerDir(t, "qwen3")
	for _, c := range []struct {
		listen string
		warns  int
	}{
		{`{extproc: "0.0.0.0:0", admin: "0.0.0.0:0"}`, 2},
		{`{extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}`, 0},
	} {
		cfg, err := config.Parse([]byte("listen: " + c.listen + "\npools:\n  - name: p\n    models: [m]\n    tokenizer: " + tokDir +
			"\n    replicas: [{name: a, address: \"127.0.0.1:1\"}]\n"))
		if err != nil {
			t.Fatal(err)
		}
		var logs logbuf.Buffer
		s, err := New(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "kvroute started") && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		out := logs.String()
		warns := strings.Count(out, "level=WARN msg=\"ext_proc listener is reachable from other machines without TLS") +
			strings.Count(out, "level=WARN msg=\"admin listener (metrics, /debug/*) is reachable from other machines")
		if warns != c.warns {
			t.Errorf("listen %s: %d warnings, want %d:\n%s", c.listen, warns, c.warns, out)
		}
	}
}
