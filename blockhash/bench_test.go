package blockhash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"slices"
	"testing"
)

func benchTokens(n int) []int {
	toks := make([]int, n)
	for i := range toks {
		toks[i] = (i*7919 + 13) % 151936
	}
	return toks
}

func benchEngine(b *testing.B, algo Algorithm) {
	seed := "0"
	e, err := NewEngine(algo, &seed, 16)
	if err != nil {
		b.Fatal(err)
	}
	toks := benchTokens(10000)
	dst := make([]uint64, 0, len(toks)/16)
	rk := RequestKeys{CacheSalt: "tenant-a"}
	b.SetBytes(int64(len(toks)))
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = AppendEventKeys(e, dst[:0], toks, rk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEngineKeys_10kTokens_* computes the 625 event keys of a 10,000-token
// prompt at block size 16 (SetBytes counts tokens, so MB/s reads as Mtokens/s).
func BenchmarkEngineKeys_10kTokens_SHA256CBOR(b *testing.B)   { benchEngine(b, SHA256CBOR) }
func BenchmarkEngineKeys_10kTokens_SHA256Pickle(b *testing.B) { benchEngine(b, SHA256) }
func BenchmarkEngineKeys_10kTokens_XXHashCBOR(b *testing.B)   { benchEngine(b, XXHashCBOR) }
func BenchmarkEngineKeys_10kTokens_XXHashPickle(b *testing.B) { benchEngine(b, XXHash) }

// BenchmarkTokenKeys_10kTokens computes kvroute's own 625 chained keys.
func BenchmarkTokenKeys_10kTokens(b *testing.B) {
	k, _ := NewTokenKeyer("pool", 16)
	toks := benchTokens(10000)
	dst := make([]uint64, 0, len(toks)/16)
	rk := RequestKeys{CacheSalt: "tenant-a"}
	var err error
	b.SetBytes(int64(len(toks)))
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = AppendKeys(k, dst[:0], k.Root(), toks, rk); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMixChain_3125Steps is the floor under TokenKeys_10kTokens: its
// 625 blocks' 3,125 mixes (four word pairs and the extra keys a block), each
// one 128-bit multiply and the one XOR chainTokenKeys puts between a product
// and the next multiply, with no ids to read.
func BenchmarkMixChain_3125Steps(b *testing.B) {
	hi, lo := uint64(1), uint64(2)
	for b.Loop() {
		hi, lo = mixChain(hi, lo, tokensC2, 3125)
	}
}

// mixChain runs n dependent mixes of the form chainTokenKeys uses; x is a
// parameter so that the compiler cannot move it after hi.
//
//go:noinline
func mixChain(hi, lo, x uint64, n int) (uint64, uint64) {
	for ; n > 0; n-- {
		hi, lo = bits.Mul64(hi^(lo^x), hi^(lo^(x+1)))
	}
	return hi, lo
}

// FuzzChain builds chains from arbitrary tokens, block sizes, algorithms and
// extra keys: no panic, the request path equals block-by-block hashing, and
// the SHA-256 digests equal crypto/sha256's of the preimage.
func FuzzChain(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0, 0, 23, 0, 0, 0, 24, 0, 0, 0}, uint8(4), uint8(1), "", "")
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0x80}, uint8(1), uint8(0), "sql-lora", "tenant-a")
	f.Add(make([]byte, 4*300), uint8(16), uint8(3), "l", "")
	f.Fuzz(func(t *testing.T, raw []byte, blockSize, algo uint8, lora, salt string) {
		toks := make([]uint32, len(raw)/4)
		for i := range toks {
			toks[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		bs := int(blockSize%64) + 1
		a := Algorithm(algo%5) + 1
		seed := salt
		e, err := NewEngine(a, &seed, bs)
		if err != nil {
			t.Fatal(err)
		}
		rk := RequestKeys{LoRAName: lora, CacheSalt: salt}
		ds, err := AppendDigests(e, nil, toks, rk)
		if err != nil {
			if a.usesPickle() {
				return // oversized preimage: refused, never a wrong hash
			}
			t.Fatal(err)
		}
		if len(ds) != len(toks)/bs {
			t.Fatalf("%d digests for %d tokens at B=%d", len(ds), len(toks), bs)
		}
		parent := e.NoneHash()
		var extra [2]Value
		for i, d := range ds {
			want, err := HashBlock(e, parent, toks[i*bs:(i+1)*bs], rk.blockExtra(extra[:0], i))
			if err != nil || want != d {
				t.Fatalf("block %d: chain %s, single %s (%v)", i, d.Hex(), want.Hex(), err)
			}
			if a == SHA256 || a == SHA256CBOR {
				pre, _ := Preimage(e, nil, parent, toks[i*bs:(i+1)*bs], rk.blockExtra(extra[:0], i))
				if sum := sha256.Sum256(pre); !bytes.Equal(sum[:], d.Bytes()) {
					t.Fatalf("block %d: %s, crypto/sha256 %x", i, d.Hex(), sum)
				}
			}
			parent = d
		}
		// 64-bit ids take sha256_cbor's chainSHA256CBOR path where B%4 == 0.
		wide := make([]uint64, len(toks))
		for i, id := range toks {
			wide[i] = uint64(id)
		}
		if dw, err := AppendDigests(e, nil, wide, rk); err != nil || !slices.Equal(dw, ds) {
			t.Fatalf("64-bit ids: %d digests, %v; 32-bit ids: %d", len(dw), err, len(ds))
		}
		k, _ := NewTokenKeyer(lora, bs)
		keys, err := AppendKeys(k, nil, k.Root(), toks, rk)
		if err != nil || len(keys) != len(ds) {
			t.Fatalf("token keys: %d, %v", len(keys), err)
		}
	})
}
