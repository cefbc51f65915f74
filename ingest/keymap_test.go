package ingest

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// checkHashTable verifies hashTable against want: every entry is found, the
// count agrees, and each run is in Robin Hood order (hashes of one home in
// mix order).
func checkHashTable(t *testing.T, tb *hashTable, want map[uint64]uint64) {
	t.Helper()
	if tb.len() != len(want) {
		t.Fatalf("table holds %d entries, want %d", tb.len(), len(want))
	}
	n := len(tb.slots)
	for i := range n {
		if tb.slots[i].h == 0 {
			continue
		}
		prev := i - 1
		if prev < 0 {
			prev = n - 1
		}
		d := tb.dist(i)
		if tb.slots[prev].h == 0 && d != 0 || tb.slots[prev].h != 0 && d > tb.dist(prev)+1 {
			t.Fatalf("slot %d of %d: hash %x sits %d from home after one %d from its own", i, n, tb.slots[i].h, d, tb.dist(prev))
		}
		if ph, h := tb.slots[prev].h, tb.slots[i].h; d > 0 && homeOf(ph, n) == homeOf(h, n) && mix(ph) > mix(h) {
			t.Fatalf("slots %d and %d: hashes of one home out of order", prev, i)
		}
		if w, ok := want[tb.slots[i].h]; !ok || w != tb.slots[i].v {
			t.Fatalf("slot %d holds %x=%x, want %x (present %v)", i, tb.slots[i].h, tb.slots[i].v, w, ok)
		}
	}
	for h, v := range want {
		if got, ok := tb.get(h); !ok || got != v {
			t.Fatalf("get(%x) = %x, %v; want %x", h, got, ok, v)
		}
	}
	if n > tableMinSlots && tb.n*tableMaxLoadDen > n*tableMaxLoadNum {
		t.Fatalf("%d entries in %d slots: over the load limit", tb.n, n)
	}
}

// runHashTableOps applies ops decoded from b to a hashTable and a plain map
// and checks they agree after each. Hashes come from a small range (hash 0
// included) so puts overwrite, deletes find their key and homes collide.
func runHashTableOps(t *testing.T, b []byte, space uint64) {
	tb := &hashTable{}
	want := map[uint64]uint64{}
	for len(b) >= 3 {
		op, h := b[0]%3, uint64(binary.LittleEndian.Uint16(b[1:]))%space
		b = b[3:]
		if h%5 == 1 {
			h |= 1 << 63
		}
		switch op {
		case 0:
			v := h*31 + uint64(len(b))
			tb.put(h, v)
			want[h] = v
		case 1:
			tb.delete(h)
			delete(want, h)
		case 2:
			got, ok := tb.get(h)
			if w, wok := want[h]; ok != wok || got != w {
				t.Fatalf("get(%x) = %x, %v; want %x, %v", h, got, ok, w, wok)
			}
		}
		checkHashTable(t, tb, want)
	}
}

func TestHashTableAgreesWithMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, space := range []uint64{5, 64, 1000, 1 << 16} {
		b := make([]byte, 3*4000)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		runHashTableOps(t, b, space)
	}
}

func FuzzHashTable(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 1, 0})
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 3*2000 {
			b = b[:3*2000]
		}
		runHashTableOps(t, b, 97)
	})
}

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
