package blockhash

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// forEachSHA256 runs f under every SHA-256 path this build and CPU have: the
// SHA-NI assembly (amd64 with the SHA extensions, not -tags purego) and
// crypto/sha256.
func forEachSHA256(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := useSHANI
	t.Cleanup(func() { useSHANI = saved })
	paths := []bool{false}
	if saved {
		paths = append(paths, true)
	} else {
		t.Log("no SHA-NI path in this build or on this CPU: crypto/sha256 only")
	}
	for _, shani := range paths {
		name := "crypto-sha256"
		if shani {
			name = "sha-ni"
		}
		useSHANI = shani
		t.Run(name, f)
	}
}

// checkSum256 compares sum256 with crypto/sha256 and checks that msg itself
// is left as it was, with spare capacity or without.
func checkSum256(t *testing.T, msg []byte) {
	t.Helper()
	want := sha256.Sum256(msg)
	orig := bytes.Clone(msg)
	for _, spare := range []int{0, 7, 200} {
		buf := append(make([]byte, 0, len(msg)+spare), msg...)
		got, scratch := sum256(buf)
		if got != want {
			t.Fatalf("len %d, spare %d: %x, want %x", len(msg), spare, got, want)
		}
		if !bytes.Equal(scratch, orig) || !bytes.Equal(buf, orig) {
			t.Fatalf("len %d, spare %d: the message changed", len(msg), spare)
		}
	}
}

// TestSum256MatchesCryptoSHA256 covers every length up to five blocks — the
// padding boundaries 55/56 and 63/64 (one or two extra blocks) in each — with
// random bytes, all-zero and all-0xff messages.
func TestSum256MatchesCryptoSHA256(t *testing.T) {
	forEachSHA256(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for n := 0; n <= 5*64; n++ {
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(rng.Uint32())
			}
			checkSum256(t, msg)
			checkSum256(t, make([]byte, n))
			checkSum256(t, bytes.Repeat([]byte{0xff}, n))
		}
		checkSum256(t, bytes.Repeat([]byte("kvroute"), 10_000)) // many blocks in one call
		checkSum256(t, nil)
	})
}

func TestPadSHA256(t *testing.T) {
	for _, c := range []struct{ n, padded int }{{0, 64}, {55, 64}, {56, 128}, {63, 128}, {64, 128}, {119, 128}, {120, 192}} {
		b := padSHA256(make([]byte, c.n))
		if len(b) != c.padded || b[c.n] != 0x80 || int(b[len(b)-1]) != (c.n*8)&0xff || int(b[len(b)-2]) != (c.n*8)>>8 {
			t.Errorf("%d bytes: padded to %d (% x), want %d", c.n, len(b), b[c.n:], c.padded)
		}
	}
}

// TestEngineSHA256PathsAgree hashes chains under both SHA-256 paths for the
// three SHA-256 algorithms, with block sizes whose preimages take one to
// ~80 compressions and outgrow the stack scratch buffer, with 32-bit ids
// (sha256_cbor one block per call) and 64-bit ids (its chainSHA256CBOR path
// where the block size is a multiple of 4, over several chunks, falling back
// where an id is 2^32 or more, the slots outgrow the ring, or there is no
// LoRA or salt).
func TestEngineSHA256PathsAgree(t *testing.T) {
	if !useSHANI {
		t.Skip("no SHA-NI path in this build or on this CPU: nothing to compare")
	}
	t.Cleanup(func() { useSHANI = true })
	rng := rand.New(rand.NewPCG(3, 4))
	// Every CBOR and pickle integer width, in runs of one width, so that
	// preimages' lengths vary widely from block to block.
	toks := make([]uint32, 0, 4200) // 1,050 blocks at B4: two chainSHA256CBOR calls
	for len(toks) < cap(toks) {
		shift := rng.Uint32() % 32
		for range min(1+rng.IntN(64), cap(toks)-len(toks)) {
			toks = append(toks, rng.Uint32()>>shift)
		}
	}
	wide := make([]uint64, len(toks))
	for i, id := range toks {
		wide[i] = uint64(id)
	}
	huge := slices.Clone(wide)
	huge[16*70+5] = 1<<32 + 7 // block 70 at B16: the second chunk falls back
	seed := "0"
	for _, rk := range []RequestKeys{
		{LoRAName: string(bytes.Repeat([]byte("l"), 70)), CacheSalt: "tenant-a"},
		{},
		{LoRAName: string(bytes.Repeat([]byte("L"), 1500))},
	} {
		for _, algo := range []Algorithm{SHA256, SHA256CBOR, SHA256CBOR64Bit} {
			for _, bs := range []int{1, 3, 4, 16, 17, 64, 188, 192, 1000} {
				for ids, chain := range map[string]func(e *Engine) ([]Digest, error){
					"uint32": func(e *Engine) ([]Digest, error) { return AppendDigests(e, nil, toks, rk) },
					"uint64": func(e *Engine) ([]Digest, error) { return AppendDigests(e, nil, wide, rk) },
					"huge":   func(e *Engine) ([]Digest, error) { return AppendDigests(e, nil, huge, rk) },
				} {
					var digests [2][]Digest
					for i, shani := range []bool{false, true} {
						useSHANI = shani
						e, err := NewEngine(algo, &seed, bs)
						if err != nil {
							t.Fatal(err)
						}
						if digests[i], err = chain(e); err != nil {
							t.Fatal(err)
						}
					}
					if len(digests[0]) != len(toks)/bs {
						t.Fatalf("%v B%d %s: %d digests", algo, bs, ids, len(digests[0]))
					}
					for j := range digests[0] {
						if digests[0][j] != digests[1][j] {
							t.Fatalf("%v B%d %s LoRA %d bytes block %d: crypto/sha256 %s, SHA-NI %s", algo, bs, ids, len(rk.LoRAName), j, digests[0][j].Hex(), digests[1][j].Hex())
						}
					}
					// Event values, appended after what dst holds.
					e, _ := NewEngine(algo, &seed, bs)
					keys, err := AppendEventKeys(e, []uint64{7, 8, 9}, wide, rk)
					if err != nil || len(keys) != 3+len(digests[0]) || keys[0] != 7 || keys[2] != 9 {
						t.Fatalf("%v B%d: event keys %d after 3, %v", algo, bs, len(keys), err)
					}
					if ids != "huge" {
						for j, d := range digests[0] {
							if keys[3+j] != d.EventValue() {
								t.Fatalf("%v B%d block %d: event key %d, digest's %d", algo, bs, j, keys[3+j], d.EventValue())
							}
						}
					}
				}
			}
		}
	}
}

// FuzzSum256 compares sum256 with crypto/sha256 on arbitrary messages.
func FuzzSum256(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 55))
	f.Add(make([]byte, 56))
	f.Add(bytes.Repeat([]byte{0x80}, 119))
	f.Fuzz(func(t *testing.T, msg []byte) {
		checkSum256(t, msg)
	})
}

// TestCBORTokensMatchHeads checks the token writers (the SSE one where the
// CPU has it, the table-driven scalar one) against appendCBORHead at every
// width boundary, for each token type, and the fallback for ids of 2^32 and
// more (and negative ones, which uint64 makes huge).
func TestCBORTokensMatchHeads(t *testing.T) {
	saved := useCBORSSE
	t.Cleanup(func() { useCBORSSE = saved })
	for _, sse := range []bool{false, true} {
		if sse && !saved {
			t.Log("no SSE token writer in this build or on this CPU")
			continue
		}
		useCBORSSE = sse
		t.Run(fmt.Sprintf("sse=%v", sse), testCBORTokensMatchHeads)
	}
}

func testCBORTokensMatchHeads(t *testing.T) {
	edges := []uint64{0, 1, 15, 16, 23, 24, 31, 32, 255, 256, 65535, 65536, 1<<24 - 1, 1 << 24, 1<<31 - 1, 1 << 31, 1<<32 - 1}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		edges = append(edges, uint64(rng.Uint32()>>(rng.Uint32()%32)))
	}
	check := func(name string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s:\n got % x\nwant % x", name, got, want)
		}
	}
	heads := func(ids []uint64) []byte {
		b := appendCBORHead([]byte{0xaa}, cborArray, uint64(len(ids)))
		for _, id := range ids {
			b = appendCBORHead(b, cborUint, id)
		}
		return b
	}
	for _, n := range []int{0, 1, 2, 16, 23, 24, len(edges)} {
		ids := edges[:n]
		u32 := make([]uint32, n)
		ints := make([]int, n)
		for i, id := range ids {
			u32[i], ints[i] = uint32(id), int(id)
		}
		want := heads(ids)
		check("uint64", appendCBORTokens([]byte{0xaa}, ids), want)
		check("uint32", appendCBORTokens([]byte{0xaa}, u32), want)
		check("int", appendCBORTokens([]byte{0xaa}, ints), want)
	}
	big := []uint64{7, 1 << 32, 300, 1<<64 - 1}
	check("2^32 and more", appendCBORTokens([]byte{0xaa}, big), heads(big))
	neg := []int{5, -1, 6, 7, 8}
	check("negative", appendCBORTokens([]byte{0xaa}, neg), heads([]uint64{5, 1<<64 - 1, 6, 7, 8}))
}

// BenchmarkSum256_100B hashes a 100-byte message, the size of a sha256_cbor
// preimage at block size 16: crypto/sha256.Sum256, then sum256 (SHA-NI and
// the in-place padding where the CPU has them).
func BenchmarkSum256_100B(b *testing.B) {
	msg := make([]byte, 100, 256)
	b.Run("crypto-sha256", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			sum := sha256.Sum256(msg)
			msg[0] = sum[0]
		}
	})
	b.Run("sum256", func(b *testing.B) {
		b.SetBytes(int64(len(msg)))
		for b.Loop() {
			sum, _ := sum256(msg)
			msg[0] = sum[0]
		}
	})
}

// FuzzCBORTokens compares the token writers with appendCBORHead on arbitrary
// 64-bit ids, each shifted right by its own low bits so every width occurs.
func FuzzCBORTokens(f *testing.F) {
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 0x20, 7, 1, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids := make([]uint64, len(raw)/8)
		for i := range ids {
			v := binary.LittleEndian.Uint64(raw[8*i:])
			ids[i] = v >> (v & 63)
		}
		want := appendCBORUints(appendCBORHead(nil, cborArray, uint64(len(ids))), ids)
		if got := appendCBORTokens(nil, ids); !bytes.Equal(got, want) {
			t.Fatalf("ids %v:\n got % x\nwant % x", ids, got, want)
		}
	})
}
