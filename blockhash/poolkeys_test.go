package blockhash

import (
	"errors"
	"sync"
	"testing"
)

func mustPoolKeys(t *testing.T, c PoolKeysConfig) *PoolKeys {
	t.Helper()
	p, err := NewPoolKeys(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPoolKeysConfiguredBlockSize(t *testing.T) {
	seed := "0"
	p := mustPoolKeys(t, PoolKeysConfig{Pool: "p", EngineKeys: true, Algorithm: SHA256CBOR, Seed: &seed, BlockSize: 16})
	if p.Learn(32) {
		t.Error("Learn overrode a configured block size")
	}
	if p.BlockSize() != 16 || p.ConfiguredBlockSize() != 16 {
		t.Errorf("block size %d (configured %d), want 16", p.BlockSize(), p.ConfiguredBlockSize())
	}
	ks, err := p.KeySet()
	if err != nil || ks == nil {
		t.Fatalf("KeySet %v, %v", ks, err)
	}
	if ks.BlockSize != 16 || ks.Tokens.BlockSize() != 16 || ks.Engine == nil || ks.Engine.BlockSize() != 16 {
		t.Errorf("key set %+v", ks)
	}
	want, _ := NewEngine(SHA256CBOR, &seed, 16)
	if ks.Engine.Algorithm() != want.Algorithm() {
		t.Errorf("engine algorithm %v", ks.Engine.Algorithm())
	}
	if again, _ := p.KeySet(); again != ks {
		t.Error("KeySet rebuilt at an unchanged block size")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = p.KeySet() }); n != 0 {
		t.Errorf("KeySet allocates %v times per call", n)
	}
}

func TestPoolKeysLearnsOnce(t *testing.T) {
	p := mustPoolKeys(t, PoolKeysConfig{Pool: "p"})
	if ks, err := p.KeySet(); ks != nil || err != nil {
		t.Fatalf("key set before the block size is known: %v, %v", ks, err)
	}
	if p.Learn(0) || p.Learn(-1) {
		t.Error("learned a non-positive block size")
	}
	if !p.Learn(16) || p.Learn(32) {
		t.Error("the first positive block size must win, once")
	}
	ks, err := p.KeySet()
	if err != nil || ks == nil || ks.BlockSize != 16 {
		t.Fatalf("KeySet %+v, %v", ks, err)
	}
	tk, _ := NewTokenKeyer("p", 16)
	if ks.Tokens.Root() != tk.Root() {
		t.Error("token keys not seeded by the pool name")
	}
	if ks.Engine != nil {
		t.Error("engine hasher without a seed")
	}
}

func TestPoolKeysRejectsEngineKeysWithoutSeedOrAlgorithm(t *testing.T) {
	seed := "0"
	if _, err := NewPoolKeys(PoolKeysConfig{Pool: "p", EngineKeys: true, Algorithm: SHA256}); !errors.Is(err, ErrNoSeed) {
		t.Errorf("engine keys without a seed: %v", err)
	}
	if _, err := NewPoolKeys(PoolKeysConfig{Pool: "p", EngineKeys: true, Seed: &seed}); err == nil {
		t.Error("engine keys without an algorithm accepted")
	}
	if _, err := NewPoolKeys(PoolKeysConfig{Pool: "p", BlockSize: -1}); err == nil {
		t.Error("negative block size accepted")
	}
	// Token keys with a seed: the engine hasher is there for the self-check.
	p := mustPoolKeys(t, PoolKeysConfig{Pool: "p", Algorithm: XXHash, Seed: &seed, BlockSize: 4})
	if ks, _ := p.KeySet(); ks.Engine == nil || ks.Tokens == nil {
		t.Errorf("token-key pool with a seed: %+v", ks)
	}
}

// TestPoolKeysConcurrentLearnAndKeySet: readers racing the one Learn all
// end on the same key set at the learned size (run with -race).
func TestPoolKeysConcurrentLearnAndKeySet(t *testing.T) {
	p := mustPoolKeys(t, PoolKeysConfig{Pool: "p"})
	var wg sync.WaitGroup
	sets := make([]*KeySet, 8)
	for i := range sets {
		wg.Go(func() {
			p.Learn(16 * (i%2 + 1))
			for sets[i] == nil {
				ks, err := p.KeySet()
				if err != nil {
					t.Error(err)
					return
				}
				sets[i] = ks
			}
		})
	}
	wg.Wait()
	for _, ks := range sets {
		if ks != sets[0] || ks.BlockSize != p.BlockSize() {
			t.Fatalf("key sets differ: %+v vs %+v (block size %d)", ks, sets[0], p.BlockSize())
		}
	}
}
