package grafana

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/discovery"
	"github.com/kvroute/kvroute/extproc"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/mesh"
	"github.com/kvroute/kvroute/routing"
	"github.com/kvroute/kvroute/server"
)

// recorder is a Registerer that keeps every collector's descriptors, so even
// vectors that have not seen a label value yet are listed.
type recorder struct{ descs []*prometheus.Desc }

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return true }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// kvrouteMetrics registers the metrics of every kvroute package the way
// package server does and returns each metric name with its label names.
func kvrouteMetrics() (map[string][]string, error) {
	rec := &recorder{}
	extproc.NewMetrics(rec)
	server.NewAdminMetrics(rec)
	server.NewAdminConnsGauge(rec)
	server.NewFleetMetrics(rec)
	server.NewReloadMetrics(rec)
	discovery.NewMetrics(rec)
	mesh.NewMetrics(rec)
	server.NewParityMetrics(rec)
	routing.NewFunnel(rec, []string{"p"})
	ix := index.New(index.Options{TTL: time.Hour, MaxEntries: 1 << 20, Registerer: rec})
	cfg, err := config.Parse([]byte(`
pools:
  - name: p
    models: [m]
    replicas:
      - {name: r0, address: "127.0.0.1:1", events: "tcp://127.0.0.1:2"}
`))
	if err != nil {
		return nil, err
	}
	pid, err := ix.AddPool("p")
	if err != nil {
		return nil, err
	}
	r0, err := ix.AddReplica(pid, "r0")
	if err != nil {
		return nil, err
	}
	rc := cfg.Pools[0].Replicas[0]
	keys, err := blockhash.NewPoolKeys(blockhash.PoolKeysConfig{Pool: "p"})
	if err != nil {
		return nil, err
	}
	if _, err := ingest.New(ingest.Options{
		Settings: ingest.Settings{QueueSize: cfg.Ingest.QueueSize, MaxMessageBytes: int64(cfg.Ingest.MaxMessageBytes)},
		Pools: []ingest.Pool{{Name: "p", ID: pid, Models: cfg.Pools[0].Models, Keys: keys, Ranks: []ingest.Rank{
			{Replica: r0, Name: "r0", ReplicaName: "r0", Address: rc.Address, DPSize: 1, Events: rc.Events},
		}}},
		Index: ix, Registerer: rec,
	}); err != nil {
		return nil, err
	}
	router, err := routing.NewRouter(ix, []routing.PoolConfig{{Name: "p", ID: pid, Keys: keys}}, routing.RouterOptions{})
	if err != nil {
		return nil, err
	}
	routing.NewFlowControl(router, rec, nil)
	out := map[string][]string{}
	for _, d := range rec.descs {
		s := d.String()
		m := descName.FindStringSubmatch(s)
		if m == nil {
			return nil, fmt.Errorf("cannot read descriptor %s", s)
		}
		var labels []string
		if l := descLabels.FindStringSubmatch(s); l != nil && l[1] != "" {
			labels = strings.Split(l[1], ",")
		}
		out[m[1]] = labels
	}
	return out, nil
}
