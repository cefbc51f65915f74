package server

import (
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest"
	"github.com/kvroute/kvroute/routing"
)

// Replica is one member of a pool's replica set as SetReplicas takes it: the
// replica as a static config would list it, and the identity of the engine
// behind it (a pod's UID; "" when the source has none, as with DNS). The
// same name with another UID, or other endpoints, is a new engine.
type Replica struct {
	Config config.Replica
	UID    string
}

// Replica changes (kvroute_replica_changes_total{change}).
const (
	changeJoin    = "join"
	changeLeave   = "leave"
	changeReplace = "replace"
)

// fleet is every pool's current replica set; SetReplicas changes it. The
// map is fixed once built; each pool's set has its own lock, so a change
// that waits on one pool's engines (a removed replica's goroutines
// stopping) never holds up another pool's.
type fleet struct {
	pools   map[string]*livePool
	changes *prometheus.CounterVec
	ranks   *prometheus.GaugeVec
}

// livePool is one pool's replicas now, in the order they were given.
type livePool struct {
	mu   sync.Mutex // serialises SetReplicas of this pool; guards reps
	cfg  *config.Pool
	id   index.PoolID
	reps []*liveReplica
}

// liveReplica is one replica and its DP ranks in the index.
type liveReplica struct {
	Replica
	ranks []rankLayout
}

// NewFleetMetrics registers the replica-set series (New does; the dashboard
// test walks them).
func NewFleetMetrics(reg prometheus.Registerer) (changes *prometheus.CounterVec, ranks *prometheus.GaugeVec) {
	changes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvroute_replica_changes_total",
		Help: "Replicas that joined, left or were replaced (same name, new engine) in a pool's replica set."}, []string{"pool", "change"})
	ranks = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvroute_replica_ranks",
		Help: "Routable replica ranks (replicas × data-parallel size) in each pool."}, []string{"pool"})
	reg.MustRegister(changes, ranks)
	return changes, ranks
}

func newFleet(lay layout, reg prometheus.Registerer) *fleet {
	f := &fleet{pools: map[string]*livePool{}}
	f.changes, f.ranks = NewFleetMetrics(reg)
	for _, pl := range lay {
		lp := &livePool{cfg: pl.cfg, id: pl.id}
		for _, rl := range pl.ranks {
			if rl.rank == 0 {
				lp.reps = append(lp.reps, &liveReplica{Replica: Replica{Config: *rl.cfg}})
			}
			last := lp.reps[len(lp.reps)-1]
			last.ranks = append(last.ranks, rl)
		}
		f.pools[pl.cfg.Name] = lp
		f.ranks.WithLabelValues(pl.cfg.Name).Set(float64(len(pl.ranks)))
		for _, c := range []string{changeJoin, changeLeave, changeReplace} {
			f.changes.WithLabelValues(pl.cfg.Name, c)
		}
	}
	return f
}

// SetReplicas makes reps the complete replica set of pool, for a discovery
// source (or a reload). Replicas present before with the same config and UID
// keep everything: index blocks, subscription, load. A new one is registered
// in the index, subscribed (with first-contact replay), scraped and probed,
// then routable. One gone, or replaced (same name, another UID or other
// endpoints: a new engine whose cache starts empty), stops being routable
// first, then its ingest stops and its blocks and in-flight state are
// dropped. The set is validated as a whole (config.ValidateReplicas) and
// refused whole on error. Safe to call while requests are routed.
func (s *Server) SetReplicas(pool string, reps []Replica) error {
	f := s.fleet
	lp := f.pools[pool]
	if lp == nil {
		return fmt.Errorf("unknown pool %q", pool)
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	cfgs := make([]config.Replica, len(reps))
	for i := range reps {
		reps[i].Config.Derive()
		cfgs[i] = reps[i].Config
	}
	if err := config.ValidateReplicas(lp.cfg, cfgs, s.bind); err != nil {
		return err
	}
	cur := map[string]*liveReplica{}
	for _, lr := range lp.reps {
		cur[lr.Config.Name] = lr
	}
	var next []*liveReplica
	var joining []*liveReplica
	changed := map[string]string{} // name → change
	for _, r := range reps {
		if lr := cur[r.Config.Name]; lr != nil && lr.Replica == r {
			next = append(next, lr)
			delete(cur, r.Config.Name)
			continue
		}
		if cur[r.Config.Name] != nil {
			changed[r.Config.Name] = changeReplace
		} else {
			changed[r.Config.Name] = changeJoin
		}
		lr := &liveReplica{Replica: r}
		joining = append(joining, lr)
		next = append(next, lr)
	}
	if len(changed) == 0 && len(cur) == 0 {
		return nil
	}
	// Leaving (and replaced) replicas stop being routable first.
	if err := s.router.SetEndpoints(pool, endpointsOf(next, func(lr *liveReplica) bool { return lr.ranks != nil })); err != nil {
		return err
	}
	for name, lr := range cur {
		s.parity.remove(pool, name)
		s.ingest.RemoveReplica(pool, name)
		for _, rl := range lr.ranks {
			s.ix.RemoveReplica(rl.r)
		}
		if changed[name] == "" {
			f.changes.WithLabelValues(pool, changeLeave).Inc()
			s.log.Info("replica left", "pool", pool, "replica", name, "ranks", len(lr.ranks))
		}
	}
	var errs []error
	for _, lr := range joining {
		if err := s.join(lp, lr); err != nil {
			errs = append(errs, err)
			next = slices.DeleteFunc(next, func(x *liveReplica) bool { return x == lr })
			continue
		}
		s.parity.add(pool, lr.Config.Name, lr.Config.Address, lp.cfg.Models)
		f.changes.WithLabelValues(pool, changed[lr.Config.Name]).Inc()
		s.log.Info("replica "+map[string]string{changeJoin: "joined", changeReplace: "replaced"}[changed[lr.Config.Name]],
			"pool", pool, "replica", lr.Config.Name, "address", lr.Config.Address, "ranks", len(lr.ranks))
	}
	lp.reps = next
	n := 0
	for _, lr := range next {
		n += len(lr.ranks)
	}
	f.ranks.WithLabelValues(pool).Set(float64(n))
	if err := s.router.SetEndpoints(pool, endpointsOf(next, nil)); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("pool %s: %w", pool, joinErrs(errs))
	}
	return nil
}

// join registers lr's ranks in the index and starts its ingest.
func (s *Server) join(lp *livePool, lr *liveReplica) error {
	rc := &lr.Config
	var ranks []ingest.Rank
	for rank := range rc.DataParallelSize {
		name := rc.RankName(rank)
		r, err := s.ix.AddReplica(lp.id, name)
		if err != nil {
			for _, rl := range lr.ranks {
				s.ix.RemoveReplica(rl.r)
			}
			lr.ranks = nil
			return fmt.Errorf("replica %s: %w", rc.Name, err)
		}
		rl := rankLayout{cfg: rc, rank: rank, name: name, r: r}
		lr.ranks = append(lr.ranks, rl)
		ranks = append(ranks, rl.ingestRank())
	}
	if err := s.ingest.AddReplica(lp.cfg.Name, ranks); err != nil {
		for _, rl := range lr.ranks {
			s.ix.RemoveReplica(rl.r)
		}
		lr.ranks = nil
		return fmt.Errorf("replica %s: %w", rc.Name, err)
	}
	return nil
}

// endpointsOf is the router's view of reps (those keep accepts; nil: all).
func endpointsOf(reps []*liveReplica, keep func(*liveReplica) bool) []routing.Endpoint {
	var out []routing.Endpoint
	for _, lr := range reps {
		if keep != nil && !keep(lr) {
			continue
		}
		for _, rl := range lr.ranks {
			out = append(out, rl.endpoint())
		}
	}
	return out
}

func joinErrs(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("%d replicas failed: %v", len(errs), errs)
}
