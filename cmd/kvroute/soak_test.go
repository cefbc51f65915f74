package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/logbuf"
	"github.com/kvroute/kvroute/internal/routebench"
	"github.com/kvroute/kvroute/internal/testdata"
)

// TestSoak is `kvroute-bench soak` made short: three kvroute processes (this
// test binary running main) on a mutual-TLS mesh in front of emulated
// engines publishing KV events, the index at a small cap, ext_proc streams
// at once on two of them while the third is stopped and continued and
// strangers hammer every mesh port. No exchange hangs or fails, every
// kvroute's descriptors and goroutines come back to where they started,
// and none recovered a panic.
func TestSoak(t *testing.T) {
	var out, progress logbuf.Buffer
	o := routebench.DefaultSoakOptions()
	o.KVRoute, o.KVRouteEnv = []string{os.Args[0]}, []string{execMainEnv + "=1"}
	// Llama 2's tokenizer loads in a fifth of Qwen3's time under -race;
	// four processes load it.
	o.TokenizerDir, o.Model = testdata.TokenizerDir(t, "llama2"), "llama2"
	// Scaled to a -race build on a shared CI machine: 100 streams at 200
	// decisions a second, a fleet and a cap a third of the full soak's.
	o.Duration, o.Streams, o.Period, o.Settle = 15*time.Second, 100, 500*time.Millisecond, 20*time.Second
	o.NumBlocks, o.MaxEntries, o.FeedRate = 160, 500, 10
	// -race kvroutes on a machine running other tests may manage a small
	// share of the decisions asked; the load only has to be real.
	o.MinShare = 0.05
	// The engines run in this -race binary: too slow to answer kvroute's
	// scrapes within the 300 ms that marks an engine frozen.
	o.NoLoadSignals = true
	o.Dir, o.Out, o.Err = t.TempDir(), &out, &progress
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := routebench.Soak(ctx, o)
	t.Logf("%s%s", progress.String(), out.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d decisions (%.0f/s), %d requests to the engines, %d hostile connections", rep.Decisions, rep.DecisionsPerSecond, rep.Fed, rep.Hostile)
}
