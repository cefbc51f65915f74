package blockhash

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// PoolKeys owns one pool's block keys: its key mode, its vLLM hash
// algorithm and seed, and its block size — configured, or learned once from
// the engines. package server creates one per pool and hands the same
// object to ingest (which learns the block size and keys BlockStored
// events) and to the router (which keys requests), so both always key at
// the same block size with the same builders.
//
// It is safe for concurrent use. KeySet is lock-free and allocation-free
// once the set for the current block size is built (the first call after
// the block size becomes known builds it under a mutex).
type PoolKeys struct {
	pool       string
	engineKeys bool
	algo       Algorithm // 0: none known (no engine hasher)
	seed       *string   // nil: unknown (no engine hasher)
	configured int       // > 0: the configured block size

	learned atomic.Int64
	set     atomic.Pointer[KeySet]
	mu      sync.Mutex // serializes building a KeySet
}

// KeySet is a pool's key builders at one block size.
type KeySet struct {
	// BlockSize is the block size in tokens both builders use.
	BlockSize int
	// Tokens builds kvroute's token keys (seeded by the pool name).
	Tokens *TokenKeyer
	// Engine reproduces vLLM's block hashes; nil when the pool has no seed or
	// algorithm (never nil in engine-key mode).
	Engine *Engine
}

// PoolKeysConfig describes a pool's keys to NewPoolKeys.
type PoolKeysConfig struct {
	// Pool is the pool's name: the seed of its token keys.
	Pool string
	// EngineKeys keys the index with vLLM's own hashes (needs Algorithm and
	// Seed); otherwise with token keys.
	EngineKeys bool
	// Algorithm and Seed are vLLM's --prefix-caching-hash-algo and
	// PYTHONHASHSEED; zero and nil when unknown (then no engine hasher).
	Algorithm Algorithm
	Seed      *string
	// BlockSize is the configured block size in tokens; 0 learns it.
	BlockSize int
}

// NewPoolKeys checks c and, with a configured block size, builds its key
// set at once (so a bad one fails here, not on the first request).
func NewPoolKeys(c PoolKeysConfig) (*PoolKeys, error) {
	if c.BlockSize < 0 {
		return nil, fmt.Errorf("pool %s: block size %d is negative", c.Pool, c.BlockSize)
	}
	if c.EngineKeys {
		if c.Seed == nil {
			return nil, fmt.Errorf("pool %s: %w", c.Pool, ErrNoSeed)
		}
		if c.Algorithm == 0 {
			return nil, fmt.Errorf("pool %s: engine keys need a hash algorithm", c.Pool)
		}
	}
	p := &PoolKeys{pool: c.Pool, engineKeys: c.EngineKeys, algo: c.Algorithm, seed: c.Seed, configured: c.BlockSize}
	if c.BlockSize > 0 {
		if _, err := p.KeySet(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Pool is the pool's name.
func (p *PoolKeys) Pool() string { return p.pool }

// EngineKeys reports whether the pool keys the index with vLLM's hashes.
func (p *PoolKeys) EngineKeys() bool { return p.engineKeys }

// Algorithm is the pool's vLLM hash algorithm, 0 when unknown.
func (p *PoolKeys) Algorithm() Algorithm { return p.algo }

// Seed is the engines' PYTHONHASHSEED, nil when unknown.
func (p *PoolKeys) Seed() *string { return p.seed }

// ConfiguredBlockSize is the configured block size, 0 when it is learned.
func (p *PoolKeys) ConfiguredBlockSize() int { return p.configured }

// BlockSize is the block size in tokens: configured, else learned, else 0
// (not known yet).
func (p *PoolKeys) BlockSize() int {
	if p.configured > 0 {
		return p.configured
	}
	return int(p.learned.Load())
}

// Learn records the engines' block size when none is configured; the first
// positive value wins. It reports whether bs was recorded now.
func (p *PoolKeys) Learn(bs int) bool {
	if p.configured > 0 || bs <= 0 {
		return false
	}
	return p.learned.CompareAndSwap(0, int64(bs))
}

// KeySet returns the key builders at the current block size, built once;
// nil (and no error) while the block size is unknown. The error is a
// builder's (a block size or seed vLLM would not accept); in token-key mode
// an engine hasher that cannot be built is left nil instead.
func (p *PoolKeys) KeySet() (*KeySet, error) {
	bs := p.BlockSize()
	if bs <= 0 {
		return nil, nil
	}
	if s := p.set.Load(); s != nil && s.BlockSize == bs {
		return s, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.set.Load(); s != nil && s.BlockSize == bs {
		return s, nil
	}
	s := &KeySet{BlockSize: bs}
	var err error
	if s.Tokens, err = NewTokenKeyer(p.pool, bs); err != nil {
		return nil, err
	}
	if p.seed != nil && p.algo != 0 {
		e, err := NewEngine(p.algo, p.seed, bs)
		switch {
		case err == nil:
			s.Engine = e
		case p.engineKeys:
			return nil, err
		}
	}
	p.set.Store(s)
	return s, nil
}
