package blockhash

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// typedValue turns a vector's typed extra key into a Value.
func typedValue(t *testing.T, k testdata.TypedKey) Value {
	t.Helper()
	switch k.T {
	case "str":
		var s string
		mustUnmarshal(t, k.V, &s)
		return Str(s)
	case "int":
		var n int64
		mustUnmarshal(t, k.V, &n)
		return Int(n)
	case "bytes":
		var h string
		mustUnmarshal(t, k.V, &h)
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		return Bytes(b)
	case "tuple", "list":
		var items []testdata.TypedKey
		mustUnmarshal(t, k.V, &items)
		vs := make([]Value, len(items))
		for i, it := range items {
			vs[i] = typedValue(t, it)
		}
		return Tuple(vs...)
	}
	t.Fatalf("unknown typed key %q", k.T)
	return Value{}
}

// extraKeys turns a block's typed extra keys (a tuple or null) into []Value.
func extraKeys(t *testing.T, k *testdata.TypedKey) []Value {
	if k == nil {
		return nil
	}
	v := typedValue(t, *k)
	if v.kind != kindTuple {
		t.Fatalf("extra keys are a %q, want a tuple", k.T)
	}
	return v.items
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("vectors: %v", err)
	}
}

func mustHex(t *testing.T, s string) []byte { t.Helper(); return testdata.Unhex(t, s) }

func loadHashVectors(t *testing.T) *testdata.BlockHashVectors {
	return testdata.LoadBlockHashVectors(t)
}

func newTestEngine(t *testing.T, algo, seed string, blockSize int) *Engine {
	t.Helper()
	a, err := ParseAlgorithm(algo)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(a, &seed, blockSize)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestNoneHashMatchesVLLM(t *testing.T) {
	forEachSHA256(t, func(t *testing.T) {
		for _, c := range loadHashVectors(t).NoneHashTable {
			e := newTestEngine(t, c.Algo, c.Seed, 16)
			pre, err := e.rootPreimage(nil, c.Seed)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(pre); got != c.PreimageHex {
				t.Errorf("%s seed %q: preimage %s, want %s", c.Algo, c.Seed, got, c.PreimageHex)
			}
			if got := e.NoneHash().Hex(); got != c.DigestHex {
				t.Errorf("%s seed %q: NONE_HASH %s, want %s", c.Algo, c.Seed, got, c.DigestHex)
			}
		}
	})
}

func TestNoSeedIsRefused(t *testing.T) {
	if _, err := NewEngine(SHA256CBOR, nil, 16); err != ErrNoSeed {
		t.Fatalf("NewEngine without seed: %v, want ErrNoSeed", err)
	}
}

// TestBlockHashesMatchVLLM checks every block of every vector: the preimage
// byte for byte, the digest and the 64-bit event value; then the request path
// (AppendDigests / AppendEventKeys) for the cases it covers (LoRA, salt).
func TestBlockHashesMatchVLLM(t *testing.T) {
	forEachSHA256(t, func(t *testing.T) {
		v := loadHashVectors(t)
		for _, c := range v.Vectors {
			t.Run(fmt.Sprintf("%s/%s/B%d", c.Case, c.Algo, c.BlockSize), func(t *testing.T) {
				e := newTestEngine(t, c.Algo, c.Seed, c.BlockSize)
				if got := e.NoneHash().Hex(); got != c.NoneHash.DigestHex {
					t.Fatalf("NONE_HASH %s, want %s", got, c.NoneHash.DigestHex)
				}
				parent := e.NoneHash()
				for _, b := range c.Blocks {
					if b.ParentHex != nil && *b.ParentHex != parent.Hex() {
						t.Fatalf("block %d: parent %s, want %s", b.Index, parent.Hex(), *b.ParentHex)
					}
					toks := c.Inputs.TokenIDs[b.TokenRange[0]:b.TokenRange[1]]
					if fmt.Sprint(toks) != fmt.Sprint(b.TokenIDs) || b.TokenRange[0] != b.Index*c.BlockSize {
						t.Fatalf("block %d: vector token range disagrees with block boundaries", b.Index)
					}
					extra := extraKeys(t, b.ExtraKeys)
					pre, err := Preimage(e, nil, parent, toks, extra)
					if err != nil {
						t.Fatal(err)
					}
					if got := hex.EncodeToString(pre); got != b.PreimageHex {
						t.Fatalf("block %d preimage:\n got %s\nwant %s", b.Index, got, b.PreimageHex)
					}
					d, err := HashBlock(e, parent, toks, extra)
					if err != nil {
						t.Fatal(err)
					}
					if d.Hex() != b.DigestHex || d.EventValue() != b.EventU64 {
						t.Fatalf("block %d: digest %s / %d, want %s / %d", b.Index, d.Hex(), d.EventValue(), b.DigestHex, b.EventU64)
					}
					parent = d
				}
				if c.Inputs.Embeds != nil || string(c.Inputs.MMFeatures) != "[]" {
					return // the request path supplies only LoRA and salt
				}
				rk := RequestKeys{}
				if c.Inputs.LoRAName != nil {
					rk.LoRAName = *c.Inputs.LoRAName
				}
				if c.Inputs.CacheSalt != nil {
					rk.CacheSalt = *c.Inputs.CacheSalt
				}
				ds, err := AppendDigests(e, nil, c.Inputs.TokenIDs, rk)
				if err != nil {
					t.Fatal(err)
				}
				keys, err := AppendEventKeys(e, nil, c.Inputs.TokenIDs, rk)
				if err != nil {
					t.Fatal(err)
				}
				if len(ds) != len(c.Blocks) || len(keys) != len(c.Blocks) {
					t.Fatalf("request path: %d digests, %d keys, want %d full blocks", len(ds), len(keys), len(c.Blocks))
				}
				for i, b := range c.Blocks {
					if ds[i].Hex() != b.DigestHex || keys[i] != b.EventU64 {
						t.Fatalf("request path block %d: %s / %d, want %s / %d", i, ds[i].Hex(), keys[i], b.DigestHex, b.EventU64)
					}
				}
			})
		}
	})
}

func TestCoarseViewMatchesVLLM(t *testing.T) {
	for _, c := range loadHashVectors(t).CoarseView {
		e := newTestEngine(t, c.Algo, c.Seed, c.HashBlockSize)
		// The vector's fine chain is the "plain" 40-token input at block size 4.
		var toks []uint64
		for _, vec := range loadHashVectors(t).Vectors {
			if vec.Case == "plain" && vec.Algo == c.Algo && vec.BlockSize == c.HashBlockSize {
				toks = vec.Inputs.TokenIDs
			}
		}
		fine, err := AppendDigests(e, nil, toks, RequestKeys{})
		if err != nil {
			t.Fatal(err)
		}
		if len(fine) != len(c.FineHex) {
			t.Fatalf("%s: %d fine digests, want %d", c.Algo, len(fine), len(c.FineHex))
		}
		for i := range fine {
			if fine[i].Hex() != c.FineHex[i] {
				t.Fatalf("%s fine %d: %s, want %s", c.Algo, i, fine[i].Hex(), c.FineHex[i])
			}
		}
		k := c.BlockSize / c.HashBlockSize
		coarse := coarseView(nil, fine, k)
		keys, _ := AppendEventKeys(e, nil, toks, RequestKeys{})
		coarseKeys := coarseView(nil, keys, k)
		if len(coarse) != len(c.CoarseHex) || len(coarseKeys) != len(c.CoarseEventU64) {
			t.Fatalf("%s: %d coarse, want %d", c.Algo, len(coarse), len(c.CoarseHex))
		}
		for j := range coarse {
			if coarse[j].Hex() != c.CoarseHex[j] || coarseKeys[j] != c.CoarseEventU64[j] {
				t.Errorf("%s coarse %d: %s / %d, want %s / %d", c.Algo, j, coarse[j].Hex(), coarseKeys[j], c.CoarseHex[j], c.CoarseEventU64[j])
			}
		}
	}
}

func TestLegacySHA256CBOR64BitMatchesVLLM(t *testing.T) {
	forEachSHA256(t, func(t *testing.T) {
		v := testdata.LoadLegacyHashVectors(t)
		for _, c := range v.Vectors {
			seed := c.Seed
			e, err := NewEngine(SHA256CBOR64Bit, &seed, c.BlockSize)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.NoneHash().EventValue(); got != c.NoneU64 {
				t.Fatalf("seed %q: NONE_HASH %d, want %d", seed, got, c.NoneU64)
			}
			var all []uint64
			parent := e.NoneHash()
			for i, b := range c.Blocks {
				all = append(all, b.TokenIDs...)
				pre, _ := Preimage(e, nil, parent, b.TokenIDs, extraKeys(t, b.ExtraKeys))
				if got := hex.EncodeToString(pre); got != b.PreimageHex {
					t.Fatalf("seed %q B%d block %d preimage:\n got %s\nwant %s", seed, c.BlockSize, i, got, b.PreimageHex)
				}
				d, _ := HashBlock(e, parent, b.TokenIDs, extraKeys(t, b.ExtraKeys))
				if d.EventValue() != b.HashU64 {
					t.Fatalf("seed %q B%d block %d: %d, want %d", seed, c.BlockSize, i, d.EventValue(), b.HashU64)
				}
				parent = d
			}
			rk := RequestKeys{}
			if c.CacheSalt != nil {
				rk.CacheSalt = *c.CacheSalt
			}
			keys, err := AppendEventKeys(e, nil, all, rk)
			if err != nil || len(keys) != len(c.Blocks) {
				t.Fatalf("request path: %d keys, err %v", len(keys), err)
			}
			for i := range keys {
				if keys[i] != c.Blocks[i].HashU64 {
					t.Fatalf("request path block %d: %d, want %d", i, keys[i], c.Blocks[i].HashU64)
				}
			}
		}
	})
}

// TestSelfCheckDetectsWrongScheme recomputes a vector run under the right and
// the wrong seed, algorithm and block size.
func TestSelfCheckDetectsWrongScheme(t *testing.T) {
	v := loadHashVectors(t)
	for _, c := range v.Vectors {
		if c.Case != "lora_and_salt" && c.Case != "plain" {
			continue
		}
		run := StoredRun[uint64]{BlockSizeTokens: c.BlockSize}
		if c.Inputs.LoRAName != nil {
			run.LoRAName = *c.Inputs.LoRAName
		}
		for _, b := range c.Blocks {
			run.Hashes = append(run.Hashes, EventHash{Value: b.EventU64})
			run.TokenIDs = append(run.TokenIDs, b.TokenIDs...)
			run.ExtraKeys = append(run.ExtraKeys, extraKeys(t, b.ExtraKeys))
		}
		name := c.Case + "/" + c.Algo
		if got, why := SelfCheck(newTestEngine(t, c.Algo, c.Seed, c.BlockSize), run); got != Match {
			t.Errorf("%s: right scheme → %v (%s)", name, got, why)
		}
		if got, _ := SelfCheck(newTestEngine(t, c.Algo, "1", c.BlockSize), run); got != Mismatch {
			t.Errorf("%s: wrong seed → %v, want mismatch", name, got)
		}
		other := "sha256_cbor"
		if c.Algo == other {
			other = "sha256"
		}
		if got, _ := SelfCheck(newTestEngine(t, other, c.Seed, c.BlockSize), run); got != Mismatch {
			t.Errorf("%s: wrong algorithm → %v, want mismatch", name, got)
		}
		if got, _ := SelfCheck(newTestEngine(t, c.Algo, c.Seed, 3), run); got != Mismatch {
			t.Errorf("%s: wrong block size → %v, want mismatch", name, got)
		}
		bytesRun := run
		bytesRun.Hashes = nil
		for _, b := range c.Blocks {
			bytesRun.Hashes = append(bytesRun.Hashes, EventHash{Raw: mustHex(t, b.DigestHex)})
		}
		if got, why := SelfCheck(newTestEngine(t, c.Algo, c.Seed, c.BlockSize), bytesRun); got != Match {
			t.Errorf("%s: bytes-mode hashes → %v (%s)", name, got, why)
		}
	}
}

func TestSelfCheckCoarseView(t *testing.T) {
	v := loadHashVectors(t)
	for _, c := range v.CoarseView {
		var toks []uint64
		for _, vec := range v.Vectors {
			if vec.Case == "plain" && vec.Algo == c.Algo && vec.BlockSize == c.HashBlockSize {
				toks = vec.Inputs.TokenIDs
			}
		}
		n := len(c.CoarseEventU64)
		run := StoredRun[uint64]{BlockSizeTokens: c.BlockSize, TokenIDs: toks[:n*c.BlockSize]}
		for _, h := range c.CoarseEventU64 {
			run.Hashes = append(run.Hashes, EventHash{Value: h})
		}
		if got, why := SelfCheck(newTestEngine(t, c.Algo, c.Seed, c.HashBlockSize), run); got != Match {
			t.Errorf("%s coarse: %v (%s)", c.Algo, got, why)
		}
	}
}

// coarseView returns the hashes a KV-cache group with block size k*B publishes
// for a chain hashed at block size B: the fine hash at the end of each coarse
// block, fine[(j+1)*k-1] (vLLM PR #45939). A trailing partial coarse block is
// dropped. It works on digests or 64-bit values alike.
func coarseView[H any](dst []H, fine []H, k int) []H {
	if k <= 0 {
		return dst
	}
	for j := k - 1; j < len(fine); j += k {
		dst = append(dst, fine[j])
	}
	return dst
}
