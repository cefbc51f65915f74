package ingest

import (
	"testing"
)

// The key map keeps at most its cap, recently used entries survive a
// generation change, and its size reaches the account.
func TestKeyMapGenerationsKeepRecentEntries(t *testing.T) {
	var counted int64
	k := newKeyMap(1000, func(d int64) { counted += d })
	for h := range uint64(10_000) {
		k.put(h, h+1)
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
