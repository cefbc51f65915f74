package ingest

import (
	"testing"

	"github.com/kvroute/kvroute/index"
)

// The key map keeps at most its cap, recently used entries survive a
// generation change, and its size reaches the account.
func TestKeyMapGenerationsKeepRecentEntries(t *testing.T) {
	var counted int64
	k := newKeyMap(1000, func(d int64) { counted += d })
	for h := range uint64(10_000) {
		k.put(h, h+1, index.TierGPU)
		if h%100 == 0 {
			if v, ok := k.get(0); !ok || v != 1 {
				t.Fatalf("after %d puts, hash 0 (used every 100) is %d, %v", h, v, ok)
			}
		}
		if k.len() > 1000 {
			t.Fatalf("after %d puts the key map holds %d entries, cap 1000", h+1, k.len())
		}
	}
	if v, ok := k.get(9_999); !ok || v != 10_000 {
		t.Fatalf("last put lost: %d, %v", v, ok)
	}
	if _, ok := k.get(5); ok {
		t.Fatal("an entry unused for 9,995 puts survived a cap of 1000")
	}
	k.sync()
	if counted != int64(k.len()) {
		t.Fatalf("account saw %d entries, the key map holds %d", counted, k.len())
	}
	k.reset()
	if counted != 0 || k.len() != 0 {
		t.Fatalf("after reset: account %d, held %d", counted, k.len())
	}
}

// An alias lives while any tier holds its block: removing the GPU copy of a
// block also offloaded to CPU keeps it, removing the CPU copy then drops it.
func TestKeyMapAliasLivesWhileATierHoldsTheBlock(t *testing.T) {
	var counted int64
	k := newKeyMap(1000, func(d int64) { counted += d })
	k.put(7, 70, index.TierGPU)
	k.put(7, 70, index.TierCPU)
	k.put(8, 80, index.TierGPU)
	if v, ok := k.remove(7, index.TierGPU); !ok || v != 70 {
		t.Fatalf("remove GPU copy: %d, %v", v, ok)
	}
	if v, ok := k.get(7); !ok || v != 70 {
		t.Fatalf("the CPU copy's alias is gone: %d, %v", v, ok)
	}
	k.remove(7, index.TierCPU)
	k.remove(8, index.TierGPU)
	k.sync()
	if k.len() != 0 || counted != 0 {
		t.Fatalf("after every tier's removal: %d held, %d counted", k.len(), counted)
	}
	if _, ok := k.remove(8, index.TierGPU); ok {
		t.Fatal("a removed alias was found again")
	}
}
