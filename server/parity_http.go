package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/routing"
)

// startParity builds the parity checks and the prompt-token funnel and
// registers the replicas the config lists (discovered ones come through
// SetReplicas).
func (s *Server) startParity(reg prometheus.Registerer) {
	s.parity = newParity(s, s.cfg.Parity, reg)
	names := make([]string, 0, len(s.cfg.Pools))
	for i := range s.cfg.Pools {
		names = append(names, s.cfg.Pools[i].Name)
	}
	s.funnel = routing.NewFunnel(reg, names)
	s.router.SetFunnel(s.funnel)
	for i := range s.cfg.Pools {
		lp := s.fleet.pools[s.cfg.Pools[i].Name]
		if lp == nil {
			continue
		}
		for _, lr := range lp.reps {
			s.parity.add(lp.cfg.Name, lr.Config.Name, lr.Config.Address, lp.cfg.Models)
		}
	}
}

// ReplicaView is one replica rank in GET /debug/replicas: what ingest knows
// of it and its parity checks.
type ReplicaView struct {
	ingest.ReplicaStatus
	Parity map[string]ParityState `json:"parity"`
	// PromptTokens is this rank's share of its pool's prompt-token funnel
	// since start, by outcome (absent before a request was routed to it).
	PromptTokens map[string]int64 `json:"prompt_tokens,omitempty"`
}

// PoolView is one pool in GET /debug/replicas.
type PoolView struct {
	Pool string `json:"pool"`
	// Routing is "prefix", or "load_only" while parity.on_mismatch is
	// route_by_load and a replica mismatches.
	Routing      string `json:"routing"`
	IndexEntries int64  `json:"index_entries"`
	// PromptTokens is the prompt tokens routed since start by outcome
	// (kvroute_prompt_tokens_total): cached_predicted, new and
	// given_up_for_load add up to the tokens routed; stale is a part of
	// cached_predicted, cached_unpredicted of new and given_up_for_load.
	PromptTokens     map[string]int64 `json:"prompt_tokens"`
	ParityMismatches []ParityFinding  `json:"parity_mismatches"`
	// Flow is the pool's flow control state (routing.flow_control).
	Flow *routing.FlowStatus `json:"flow,omitempty"`
}

// ReplicasView is the whole GET /debug/replicas answer.
type ReplicasView struct {
	Pools    []PoolView    `json:"pools"`
	Replicas []ReplicaView `json:"replicas"`
}

// Replicas is what GET /debug/replicas shows.
func (s *Server) Replicas() ReplicasView {
	var v ReplicasView
	for _, st := range s.ingest.Status() {
		v.Replicas = append(v.Replicas, ReplicaView{ReplicaStatus: st, Parity: s.parity.replicaStates(st.Pool, replicaOf(&st)),
			PromptTokens: s.funnel.RankTotals(st.Pool, st.Replica)})
	}
	for i := range s.cfg.Pools {
		name := s.cfg.Pools[i].Name
		pv := PoolView{Pool: name, Routing: "prefix", PromptTokens: s.funnel.Totals(name)}
		var loadOnly map[string]bool
		pv.ParityMismatches, loadOnly = s.parity.mismatches(name)
		if pv.ParityMismatches == nil {
			pv.ParityMismatches = []ParityFinding{}
		}
		if loadOnly[name] {
			pv.Routing = "load_only"
		}
		if lp := s.fleet.pools[name]; lp != nil {
			pv.IndexEntries = s.ix.Entries(lp.id)
		}
		if s.flow != nil {
			if fs, ok := s.flow.PoolStatus(name); ok {
				pv.Flow = &fs
			}
		}
		v.Pools = append(v.Pools, pv)
	}
	return v
}

func (s *Server) serveReplicas(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.Replicas())
}

// serveReadyz answers 503 until every pool has a replica with a live event
// stream or load data. A parity mismatch does not make kvroute unready —
// every request is still routed, by prefix or (route_by_load) by load —
// but the answer names each mismatching check, so a probe log shows it.
func (s *Server) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	if !s.Ready() {
		http.Error(w, "not ready: some pool has no replica with a live event stream or load data yet", http.StatusServiceUnavailable)
		return
	}
	found, loadOnly := s.parity.mismatches("")
	if len(found) == 0 {
		fmt.Fprintln(w, "ready")
		return
	}
	fmt.Fprintf(w, "ready; parity mismatches: %d\n", len(found))
	for _, f := range found {
		fmt.Fprintf(w, "pool %s replica %s: %s mismatch\n", f.Pool, f.Replica, f.Check)
	}
	pools := make([]string, 0, len(loadOnly))
	for p := range loadOnly {
		pools = append(pools, p)
	}
	slices.Sort(pools)
	for _, p := range pools {
		fmt.Fprintf(w, "pool %s routes by load only until parity returns\n", p)
	}
}
