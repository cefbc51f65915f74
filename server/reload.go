package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/config"
)

// Results of kvroute_config_reloads_total.
const (
	reloadApplied         = "applied"
	reloadUnchanged       = "unchanged"
	reloadInvalid         = "invalid"
	reloadRestartRequired = "restart_required"
)

// ErrRestartRequired is returned (wrapped, naming the keys) by Reload for a
// config that changes keys only a restart applies.
var ErrRestartRequired = errors.New("these keys change only with a restart")

// staticReplicas matches a static pool's replicas key: pools[N].replicas...
var staticReplicas = regexp.MustCompile(`^pools\[(\d+)\]\.replicas(\[|$)`)

// reloadMetrics are the reload series.
type reloadMetrics struct {
	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	info        *prometheus.GaugeVec
}

// NewReloadMetrics registers the config-reload series with reg, every
// result of kvroute_config_reloads_total at 0.
func NewReloadMetrics(reg prometheus.Registerer) (reloads *prometheus.CounterVec, lastSuccess prometheus.Gauge, info *prometheus.GaugeVec) {
	m := reloadMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_config_reloads_total",
			Help: "Config reloads (file change or SIGHUP) by result: applied, unchanged, invalid (the file does not validate), restart_required (a key that changes only with a restart)."},
			[]string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvroute_config_last_reload_success_timestamp_seconds",
			Help: "When the running config was last loaded or reloaded successfully (unix seconds)."}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_config_info",
			Help: "1 for the sha256 of the config file the server runs."}, []string{"sha256"}),
	}
	reg.MustRegister(m.reloads, m.lastSuccess, m.info)
	for _, r := range []string{reloadApplied, reloadUnchanged, reloadInvalid, reloadRestartRequired} {
		m.reloads.WithLabelValues(r)
	}
	return m.reloads, m.lastSuccess, m.info
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	m := &reloadMetrics{}
	m.reloads, m.lastSuccess, m.info = NewReloadMetrics(reg)
	return m
}

// Reload applies cfg (already validated) in place of the running config:
// the keys tagged reload:"live" in config (routing's cost model and limits)
// and the replica lists of static pools (through SetReplicas: unchanged
// replicas keep their index). A cfg that
// changes anything else is refused whole with ErrRestartRequired naming the
// keys; nothing is applied then. It reports whether anything changed.
func (s *Server) Reload(cfg *config.Config) (changed bool, err error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	diff := config.Diff(s.cfg, cfg)
	if len(diff) == 0 {
		return false, nil
	}
	var restart []string
	pools := map[int]bool{}
	for _, key := range diff {
		if config.Live(key) {
			continue
		}
		if m := staticReplicas.FindStringSubmatch(key); m != nil {
			i, _ := strconv.Atoi(m[1])
			if s.cfg.Pools[i].Discovery.Kind == config.DiscoveryStatic && cfg.Pools[i].Discovery.Kind == config.DiscoveryStatic {
				pools[i] = true
				continue
			}
		}
		restart = append(restart, key)
	}
	if len(restart) > 0 {
		return false, fmt.Errorf("%w: %s", ErrRestartRequired, strings.Join(restart, ", "))
	}
	s.router.SetOptions(RouterOptions(cfg.Routing))
	var errs []error
	for i := range cfg.Pools {
		if !pools[i] {
			continue
		}
		reps := make([]Replica, len(cfg.Pools[i].Replicas))
		for j, rc := range cfg.Pools[i].Replicas {
			reps[j] = Replica{Config: rc}
		}
		if err := s.SetReplicas(cfg.Pools[i].Name, reps); err != nil {
			errs = append(errs, err)
		}
	}
	s.cfg = cfg
	s.parity.kickAll()
	return true, errors.Join(errs...)
}

// ReloadFile reads, validates and applies the config file at path (Reload),
// counting and logging the result; the running config stays on any error.
// data is the file's content when the caller has read it (nil: read here).
func (s *Server) ReloadFile(path string, data []byte) error {
	if data == nil {
		var err error
		if data, err = config.ReadFile(path); err != nil {
			s.reload.reloads.WithLabelValues(reloadInvalid).Inc()
			s.log.Error("config reload: cannot read the file; the running config stays", "config", path, "err", err)
			return err
		}
	}
	cfg, err := config.Parse(data)
	if err != nil {
		s.reload.reloads.WithLabelValues(reloadInvalid).Inc()
		s.log.Error("config reload: the new config is invalid; the running config stays", "config", path, "err", err)
		return err
	}
	changed, err := s.Reload(cfg)
	switch {
	case errors.Is(err, ErrRestartRequired):
		s.reload.reloads.WithLabelValues(reloadRestartRequired).Inc()
		s.log.Error("config reload: refused; the running config stays until a restart", "config", path, "err", err)
		return err
	case err != nil:
		s.reload.reloads.WithLabelValues(reloadInvalid).Inc()
		s.log.Error("config reload: applied in part", "config", path, "err", err)
		return err
	case !changed:
		s.reload.reloads.WithLabelValues(reloadUnchanged).Inc()
	default:
		s.reload.reloads.WithLabelValues(reloadApplied).Inc()
		s.log.Info("config reloaded", "config", path)
	}
	s.setConfigInfo(data)
	return nil
}

// setConfigInfo records data as the running config file.
func (s *Server) setConfigInfo(data []byte) {
	sum := sha256.Sum256(data)
	s.reload.info.Reset()
	s.reload.info.WithLabelValues(hex.EncodeToString(sum[:])).Set(1)
	s.reload.lastSuccess.SetToCurrentTime()
}

// WatchConfig reloads the config file at path when its content changes
// (polled every interval; 0 polls never) and whenever trigger fires
// (SIGHUP), until ctx ends. loaded is the content the server started from.
func (s *Server) WatchConfig(ctx context.Context, path string, loaded []byte, interval time.Duration, trigger <-chan struct{}) {
	s.setConfigInfo(loaded)
	last := sha256.Sum256(loaded)
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		forced := false
		select {
		case <-ctx.Done():
			return
		case <-trigger:
			forced = true
		case <-tick:
		}
		data, err := config.ReadFile(path)
		if err != nil {
			if forced {
				s.reload.reloads.WithLabelValues(reloadInvalid).Inc()
				s.log.Error("config reload: cannot read the file; the running config stays", "config", path, "err", err)
			}
			continue // a file being replaced may be missing for a moment
		}
		sum := sha256.Sum256(data)
		if sum == last && !forced {
			continue
		}
		last = sum
		func() {
			defer s.panics.Recover(panicReload, s.log, nil)
			_ = s.ReloadFile(path, data)
		}()
	}
}

// panicReload is kvroute_panics_total's component for config reloads.
const panicReload = "config_reload"
