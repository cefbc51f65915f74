package blockhash

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// specTokenKeys re-implements the documented version-2 definition plainly, so
// a change to the optimised code that alters any step fails here.
func specTokenKeys(poolSeed string, b int, tokens []uint32, lora, salt string) []uint64 {
	mix := func(a, b uint64) uint64 { hi, lo := bits.Mul64(a, b); return hi ^ lo }
	root := xxhash.Sum64([]byte("kvroute-tokens-v2\x00" + poolSeed))
	var keys []uint64
	parent := root
	for i := 0; (i+1)*b <= len(tokens); i++ {
		block := tokens[i*b : (i+1)*b]
		var words []uint64
		for j := 0; j < len(block); j += 2 {
			w := uint64(block[j])
			if j+1 < len(block) {
				w |= uint64(block[j+1]) << 32
			}
			words = append(words, w)
		}
		if len(words)%2 == 1 {
			words = append(words, 0)
		}
		h := parent ^ tokensC1 ^ uint64(len(block))*tokensC2
		for j := 0; j < len(words); j += 2 {
			h = mix(words[j]^tokensC2^h, words[j+1]^tokensC3^h)
		}
		var items [][]byte
		if lora != "" {
			items = append(items, append([]byte{0x60 | byte(len(lora))}, lora...))
		}
		if i == 0 && salt != "" {
			items = append(items, append([]byte{0x60 | byte(len(salt))}, salt...))
		}
		var extra []byte
		if len(items) == 0 {
			extra = []byte{0xf6}
		} else {
			extra = []byte{0x80 | byte(len(items))}
			for _, it := range items {
				extra = append(extra, it...)
			}
		}
		parent = mix(h^tokensC4, xxhash.Sum64(extra)^tokensC1)
		keys = append(keys, parent)
	}
	return keys
}

func TestTokenKeysFollowTheirDefinition(t *testing.T) {
	tokens := make([]uint32, 100)
	for i := range tokens {
		tokens[i] = uint32(i*7919) % 151936
	}
	for _, tc := range []struct{ lora, salt string }{{"", ""}, {"sql-lora", ""}, {"", "tenant-a"}, {"sql-lora", "tenant-a"}} {
		k, err := NewTokenKeyer("pool-a", 16)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendKeys(k, nil, k.Root(), tokens, RequestKeys{LoRAName: tc.lora, CacheSalt: tc.salt})
		if err != nil {
			t.Fatal(err)
		}
		want := specTokenKeys("pool-a", 16, tokens, tc.lora, tc.salt)
		if len(got) != 6 || len(got) != len(want) {
			t.Fatalf("%+v: %d keys, want 6", tc, len(got))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%+v block %d: %x, want %x", tc, i, got[i], want[i])
			}
		}
	}
}

// TestTokenKeysAreStable pins two values of the version-2 scheme (recorded
// when it was defined, replacing version 1's 0xf95453b2e58ee9da,
// 0x50e13185b285dcaf): keys written by one kvroute version must be found by
// the next, so this test failing means a breaking change.
func TestTokenKeysAreStable(t *testing.T) {
	k, _ := NewTokenKeyer("qwen3", 4)
	keys, err := AppendKeys(k, nil, k.Root(), []int{1, 2, 23, 24, 255, 256, 65535, 65536}, RequestKeys{CacheSalt: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{0x4439e36e8342d7b7, 0xd36c2756c3bf3357}; len(keys) != 2 || keys[0] != want[0] || keys[1] != want[1] {
		t.Fatalf("keys %#x, want %#x", keys, want)
	}
}

// Block sizes that are not a multiple of 4 end on a partial word pair.
func TestTokenKeysFollowTheirDefinitionOddBlockSizes(t *testing.T) {
	tokens := make([]uint32, 60)
	for i := range tokens {
		tokens[i] = uint32(i*104729) % 151936
	}
	for _, b := range []int{1, 2, 3, 5, 6, 7} {
		k, _ := NewTokenKeyer("pool-b", b)
		got, err := AppendKeys(k, nil, k.Root(), tokens, RequestKeys{LoRAName: "l"})
		if err != nil {
			t.Fatal(err)
		}
		want := specTokenKeys("pool-b", b, tokens, "l", "")
		if len(got) != len(want) {
			t.Fatalf("block size %d: %d keys, want %d", b, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("block size %d block %d: %x, want %x", b, i, got[i], want[i])
			}
		}
	}
}

func TestTokenKeysContinueFromEventParent(t *testing.T) {
	k, _ := NewTokenKeyer("p", 4)
	tokens := []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
	rk := RequestKeys{LoRAName: "l", CacheSalt: "s"}
	full, _ := AppendKeys(k, nil, k.Root(), tokens, rk)
	// An event for blocks 1..2 carries the parent key of block 0 and its tokens.
	tail, _ := AppendKeys(k, nil, full[0], tokens[4:], rk)
	if len(full) != 3 || len(tail) != 2 || tail[0] != full[1] || tail[1] != full[2] {
		t.Fatalf("continuation %x, full chain %x", tail, full)
	}
	single, _ := BlockKey(k, full[0], tokens[4:8], []Value{Str("l")})
	if single != full[1] {
		t.Fatalf("BlockKey %x, want %x", single, full[1])
	}
}

func TestTokenKeysSeparateSaltLoRAAndPools(t *testing.T) {
	tokens := []int{1, 2, 3, 4, 5, 6, 7, 8}
	k, _ := NewTokenKeyer("p", 4)
	plain, _ := AppendKeys(k, nil, k.Root(), tokens, RequestKeys{})
	salted, _ := AppendKeys(k, nil, k.Root(), tokens, RequestKeys{CacheSalt: "t"})
	lora, _ := AppendKeys(k, nil, k.Root(), tokens, RequestKeys{LoRAName: "u"})
	k2, _ := NewTokenKeyer("q", 4)
	other, _ := AppendKeys(k2, nil, k2.Root(), tokens, RequestKeys{})
	for i := range plain {
		if plain[i] == salted[i] || plain[i] == lora[i] || plain[i] == other[i] || salted[i] == lora[i] {
			t.Fatalf("block %d: keys collide across salt/LoRA/pool", i)
		}
	}
}

func TestTokenKeysRejectHugeTokenIDs(t *testing.T) {
	k, _ := NewTokenKeyer("p", 2)
	if _, err := AppendKeys(k, nil, k.Root(), []uint64{1, 1 << 32}, RequestKeys{}); err == nil {
		t.Fatal("token id 2^32 accepted")
	}
}

// TestAppendKeysMatchBlockByBlockKeys checks AppendKeys' chain (its own loop
// where the block size is a multiple of 16) against BlockKey applied block by
// block, the definition as written, over random ids, block sizes, extra keys,
// parents and id types, including ids outside [0, 2^32) at random places.
func TestAppendKeysMatchBlockByBlockKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(18, 5))
	sizes := []int{16, 32, 48, 64, 128, 256, 1, 4, 8, 12, 20}
	for iter := range 3000 {
		bs := sizes[iter%len(sizes)]
		k, _ := NewTokenKeyer("pool", bs)
		ids := make([]uint64, r.IntN(12*bs+1))
		for i := range ids {
			ids[i] = r.Uint64N(1 << 32)
		}
		if iter%3 == 0 && len(ids) > 0 {
			ids[r.IntN(len(ids))] |= 1 << (32 + r.IntN(32))
		}
		var rk RequestKeys
		if r.IntN(2) == 0 {
			rk.LoRAName = "sql-lora"
		}
		if r.IntN(2) == 0 {
			rk.CacheSalt = "tenant-a"
		}
		parent := k.Root()
		if r.IntN(4) == 0 {
			parent = r.Uint64()
		}
		want, wantErr := blockByBlockKeys(k, parent, ids, rk)
		prefix := []uint64{7, 8}
		for _, got := range [][]uint64{
			keysAs[uint64](t, k, prefix, parent, ids, rk, wantErr),
			keysAs[int](t, k, prefix, parent, ids, rk, wantErr),
			keysAs[int64](t, k, prefix, parent, ids, rk, wantErr),
		} {
			if !slices.Equal(got[:2], prefix) || !slices.Equal(got[2:], want) {
				t.Fatalf("B=%d %d ids %+v parent %#x: keys %#x, want %#x", bs, len(ids), rk, parent, got, want)
			}
		}
		if wantErr == nil {
			narrow := make([]uint32, len(ids))
			for i, id := range ids {
				narrow[i] = uint32(id)
			}
			if got, err := AppendKeys(k, nil, parent, narrow, rk); err != nil || !slices.Equal(got, want) {
				t.Fatalf("B=%d uint32 ids: keys %#x (%v), want %#x", bs, got, err, want)
			}
		}
	}
}

// keysAs runs AppendKeys on ids converted to T after prefix and checks its
// error against wantErr.
func keysAs[T Token](t *testing.T, k *TokenKeyer, prefix []uint64, parent uint64, ids []uint64, rk RequestKeys, wantErr error) []uint64 {
	t.Helper()
	typed := make([]T, len(ids))
	for i, id := range ids {
		typed[i] = T(id)
	}
	got, err := AppendKeys(k, slices.Clone(prefix), parent, typed, rk)
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("B=%d: error %v, want %v", k.BlockSize(), err, wantErr)
	}
	return got
}

// blockByBlockKeys chains BlockKey over the full blocks of ids with the
// request's extra keys, stopping at the first error.
func blockByBlockKeys(k *TokenKeyer, parent uint64, ids []uint64, rk RequestKeys) ([]uint64, error) {
	bs := k.BlockSize()
	first := 1
	if parent == k.Root() {
		first = 0
	}
	var keys []uint64
	var extra [2]Value
	for i := 0; (i+1)*bs <= len(ids); i++ {
		key, err := BlockKey(k, parent, ids[i*bs:(i+1)*bs], rk.blockExtra(extra[:0], i+first))
		if err != nil {
			return keys, fmt.Errorf("block %d: %w", i, err)
		}
		keys = append(keys, key)
		parent = key
	}
	return keys, nil
}
