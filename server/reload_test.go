package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/config"
)

// TestWatchConfigReloadsOnTrigger: with polling off, only the trigger
// (SIGHUP in `kvroute serve`) reloads: an unchanged file counts as
// unchanged, a changed routing key is applied live.
func TestWatchConfigReloadsOnTrigger(t *testing.T) {
	a := newReplica(t)
	s, _ := startServer(t, a)
	path := filepath.Join(t.TempDir(), "kvroute.yaml")
	doc := `listen: {extproc: "127.0.0.1:0", admin: "127.0.0.1:0"}
routing: {debug_headers: true}
ingest: {scrape_interval: 100ms, stall_timeout: 2s}
pools:
  - name: qwen
    models: [qwen]
    tokenizer: ` + s.cfg.Pools[0].Tokenizer + `
    block_size: 16
    replicas:
      - {name: r0, address: "` + a.http.Listener.Addr().String() + `", events: "` + a.pub.Endpoint() + `"}
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	data, _ := config.ReadFile(path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trigger := make(chan struct{})
	go s.WatchConfig(ctx, path, data, 0, trigger)
	trigger <- struct{}{}
	waitUntil(t, "an unchanged reload", func() bool { return metricValue(t, s, "kvroute_config_reloads_total", `result="unchanged"`) == 1 })

	changed := strings.Replace(doc, "routing: {debug_headers: true}", "routing: {debug_headers: true, placement_slack: 0.25}", 1)
	if err := os.WriteFile(path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	trigger <- struct{}{}
	waitUntil(t, "an applied reload", func() bool { return metricValue(t, s, "kvroute_config_reloads_total", `result="applied"`) == 1 })
	if got := s.router.Options().PlacementSlack; got != 0.25 {
		t.Fatalf("placement_slack %v after the reload, want 0.25", got)
	}
	if metricValue(t, s, "kvroute_config_info") != 1 {
		t.Fatal("kvroute_config_info does not hold one series")
	}
}
