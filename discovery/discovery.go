// Package discovery follows a fleet of vLLM engines that comes and goes: it
// turns a source of truth (the Kubernetes API, DNS records) into the current
// set of engines of one pool. It knows nothing of routing, ingest or the
// config file: package server builds each pool's Source from the config,
// turns every Target into a replica with the pool's port template and hands
// the set to the running server (Server.SetReplicas), which subscribes to
// new engines and drops the ones that left.
package discovery

import (
	"context"
	"net/netip"

	"github.com/kvroute/kvroute/internal/engine"
)

// Target is one engine a source found.
type Target struct {
	// Name is unique within the pool and stable while the engine lives:
	// the pod's name, or the IP for DNS. It becomes the replica's name in
	// logs, metrics and the index.
	Name string
	// UID tells a new engine from an old one at the same Name or IP (the
	// pod's UID; "" for DNS, whose records carry no identity). A Target
	// whose UID changed is a new replica: the old one's blocks are gone.
	UID string
	// IP is the engine's address; the ports come from the pool's template.
	IP netip.Addr
	// Ports override the pool's port template where non-zero (a pod's
	// kvroute.io/* annotations, an InferencePool's target port).
	Ports engine.Ports
	// DataParallelSize overrides the pool's DP size where non-zero.
	DataParallelSize int
}

// Source reports a pool's engines.
type Source interface {
	// Run calls update with the complete current set of ready engines each
	// time it changes (the first call as soon as the set is known, possibly
	// empty), until ctx ends; it returns ctx's error then, or an error that
	// stops it for good (bad credentials, an unknown resource). Transient
	// failures (a DNS timeout, a watch that drops) keep the last set, are
	// retried with backoff, and are counted by the source. update is never
	// called concurrently and must not retain the slice.
	Run(ctx context.Context, update func([]Target)) error
}
