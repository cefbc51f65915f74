package ingest

import (
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest/vllmevent"
)

// Self-check sampling: the first selfCheckFirst runs from block 0 of every
// rank, then one in selfCheckEvery (the check rehashes with vLLM's algorithm,
// which costs more than applying the event).
const (
	selfCheckFirst = 16
	selfCheckEvery = 64
)

// tierOf maps an event's medium to an index tier: GPU (or none, as before
// vLLM sent the field) → GPU; CPU, STORAGE and anything else → CPU.
func tierOf(ev *vllmevent.Event) index.Tier {
	if !ev.HasMedium || ev.Medium == vllmevent.MediumGPU || ev.Medium == "" {
		return index.TierGPU
	}
	return index.TierCPU
}

// applyEvent writes one event to the index under the pool's key mode.
func (rs *rankState) applyEvent(ev *vllmevent.Event) {
	switch ev.Type {
	case vllmevent.EventBlockStored:
		rs.applyStored(ev)
	case vllmevent.EventBlockRemoved:
		rs.applyRemoved(ev)
	case vllmevent.EventAllBlocksCleared:
		rs.met.cleared.Inc()
		rs.clear()
	default:
		rs.met.unknown.Inc()
	}
}

// appliesGroup reports whether events of the event's KV-cache group are
// applied: only groups that keep the whole prefix (full attention and
// kin). BlockRemoved carries no kind, so the kind seen in the group's
// BlockStored events decides.
func (rs *rankState) appliesGroup(ev *vllmevent.Event) bool {
	if ev.HasKVCacheSpecKind {
		ok := prefixKinds[ev.KVCacheSpecKind]
		if ev.HasGroupIdx {
			if rs.groupKinds == nil {
				rs.groupKinds = map[int]bool{}
			}
			if len(rs.groupKinds) < 64 {
				rs.groupKinds[ev.GroupIdx] = ok
			}
		}
		return ok
	}
	if ev.HasGroupIdx {
		if ok, known := rs.groupKinds[ev.GroupIdx]; known {
			return ok
		}
	}
	return true
}

func (rs *rankState) applyStored(ev *vllmevent.Event) {
	if !rs.appliesGroup(ev) {
		rs.met.skipGroup.Inc()
		return
	}
	ps := rs.pool
	if ev.BlockSize > 0 && ev.BlockSize != rs.eventBS {
		rs.eventBS = ev.BlockSize
		rs.st.update(func(st *rankStatus) { st.EventBlockSize = ev.BlockSize })
	}
	full := ev.BlockSize > 0 && len(ev.TokenIDs) == len(ev.BlockHashes)*ev.BlockSize
	if full && ps.keys.Learn(ev.BlockSize) {
		rs.mgr.log.Info("ingest: learned block size from KV events", "pool", ps.in.Name, "block_size", ev.BlockSize)
	}
	bs := ps.keys.BlockSize()
	if ev.BlockSize > 0 && bs > 0 && ev.BlockSize != bs {
		rs.met.skipBS.Inc()
		return
	}
	keys := rs.keysBuf[:0]
	if ps.keys.EngineKeys() {
		for _, h := range ev.BlockHashes {
			keys = append(keys, index.BlockKey(h.Value))
		}
	} else {
		if !full || bs == 0 {
			rs.met.skipTok.Inc()
			return
		}
		ks, err := ps.keys.KeySet()
		if err != nil || ks == nil || ks.BlockSize != bs {
			rs.met.skipTok.Inc()
			return
		}
		keyer := ks.Tokens
		parent := keyer.Root()
		if ev.HasParent {
			p, ok := rs.keys.get(ev.ParentBlockHash.Value)
			if !ok {
				rs.met.parentUnknown.Inc()
				rs.st.update(func(st *rankStatus) { st.ParentUnknown++ })
				return
			}
			parent = p
		}
		var extraBuf [2]blockhash.Value
		tier := tierOf(ev)
		for i, h := range ev.BlockHashes {
			k, err := blockhash.BlockKey(keyer, parent, ev.TokenIDs[i*bs:(i+1)*bs], blockExtra(ev, i, extraBuf[:0]))
			if err != nil {
				rs.keys.sync()
				rs.met.skipTok.Inc()
				return
			}
			rs.keys.put(h.Value, k, tier)
			keys = append(keys, index.BlockKey(k))
			parent = k
		}
		rs.keys.sync()
	}
	rs.keysBuf = keys
	if again := rs.mgr.ix.Store(rs.r, keys, tierOf(ev)); again > 0 {
		rs.st.update(func(st *rankStatus) { st.BlocksStoredAgain += int64(again) })
	}
	rs.met.stored.Inc()
	rs.met.blocksStored.Add(float64(len(keys)))
	if !ev.HasParent && full {
		rs.selfCheck(ev)
	}
}

// blockExtra returns block i's extra keys: the event's extra_keys entry i
// (since vLLM PR #33304), else the LoRA name alone (older engines).
func blockExtra(ev *vllmevent.Event, i int, buf []blockhash.Value) []blockhash.Value {
	if ev.HasExtraKeys {
		if i >= len(ev.ExtraKeys) || ev.ExtraKeys[i] == nil {
			return nil
		}
		items := ev.ExtraKeys[i]
		if len(items) <= cap(buf) {
			buf = buf[:0]
		} else {
			buf = make([]blockhash.Value, 0, len(items))
		}
		for _, x := range items {
			buf = append(buf, x.Value())
		}
		return buf
	}
	if ev.HasLoRAName && ev.LoRAName != "" {
		return append(buf[:0], blockhash.Str(ev.LoRAName))
	}
	return nil
}

func (rs *rankState) applyRemoved(ev *vllmevent.Event) {
	if !rs.appliesGroup(ev) {
		rs.met.skipGroup.Inc()
		return
	}
	keys := rs.keysBuf[:0]
	engine := rs.pool.keys.EngineKeys()
	tier := tierOf(ev)
	for _, h := range ev.BlockHashes {
		if engine {
			keys = append(keys, index.BlockKey(h.Value))
			continue
		}
		// The alias goes with the last tier the engine held the block in.
		k, ok := rs.keys.remove(h.Value, tier)
		if !ok {
			rs.met.skipRem.Inc()
			continue
		}
		keys = append(keys, index.BlockKey(k))
	}
	rs.keysBuf = keys
	if !engine {
		rs.keys.sync()
	}
	rs.mgr.ix.Remove(rs.r, keys, tier)
	rs.met.removed.Inc()
	rs.met.blocksRemoved.Add(float64(len(keys)))
}

// selfCheck recomputes a run from block 0 with the pool's configured vLLM
// algorithm and seed (when a seed is configured) and counts mismatches.
func (rs *rankState) selfCheck(ev *vllmevent.Event) {
	rs.checks++
	if rs.mgr.tuning.noSelfCheck || rs.checks > selfCheckFirst && rs.checks%selfCheckEvery != 0 {
		return
	}
	ps := rs.pool
	ks, err := ps.keys.KeySet()
	if err != nil || ks == nil || ks.Engine == nil || ks.BlockSize != ev.BlockSize {
		return // no seed configured (vLLM's root hash is then random per process)
	}
	e := ks.Engine
	run := blockhash.StoredRun[uint32]{Hashes: ev.BlockHashes, TokenIDs: ev.TokenIDs, BlockSizeTokens: ev.BlockSize, LoRAName: ev.LoRAName}
	if ev.HasExtraKeys {
		run.ExtraKeys = make([][]blockhash.Value, len(ev.ExtraKeys))
		for i := range ev.ExtraKeys {
			run.ExtraKeys[i] = blockExtra(ev, i, nil)
		}
	}
	verdict, reason := blockhash.SelfCheck(e, run)
	rs.mgr.m.selfCheck.WithLabelValues(ps.in.Name, verdict.String()).Inc()
	if verdict == blockhash.Match {
		rs.st.update(func(st *rankStatus) { st.SelfChecks++; st.LastSelfCheck = verdict.String() })
	}
	if verdict != blockhash.Mismatch {
		return
	}
	rs.mgr.m.schemeMismatch.WithLabelValues(ps.in.Name).Inc()
	now := rs.mgr.now()
	var warn bool
	rs.st.update(func(st *rankStatus) {
		st.SchemeMismatches++
		st.SelfChecks++
		st.LastSelfCheck = verdict.String()
		if now.Sub(st.lastMismatchLog) >= time.Minute {
			st.lastMismatchLog, warn = now, true
		}
	})
	if warn {
		rs.mgr.log.Warn("ingest: engine block hashes do not match the configured hash scheme (check hash.algorithm, hash.seed = PYTHONHASHSEED, block_size)",
			"pool", ps.in.Name, "replica", rs.name, "algorithm", e.Algorithm().String(), "reason", reason)
	}
}
