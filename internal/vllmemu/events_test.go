package vllmemu

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/ingest/vllmevent"
	"github.com/kvroute/kvroute/internal/testdata"
)

func loadEventVectors(t *testing.T) *testdata.KVEventVectors { return testdata.LoadKVEventVectors(t) }

func digestsHex(ds []blockhash.Digest) []string {
	out := make([]string, len(ds))
	for i := range ds {
		out[i] = ds[i].Hex()
	}
	return out
}

// TestEventPayloadsMatchVLLMBlockPool drives the emulator's scheduler and
// block pool through the steps vLLM's own BlockPool went through for the
// golden vectors and compares every batch byte for byte, in the current map
// layout and the legacy positional layout.
func TestEventPayloadsMatchVLLMBlockPool(t *testing.T) {
	v := loadEventVectors(t)
	for _, sc := range v.Scenarios {
		name := fmt.Sprintf("%s/seed%s/int=%v", sc.Algo, sc.Seed, sc.IntHashes)
		t.Run(name, func(t *testing.T) {
			algo, err := blockhash.ParseAlgorithm(sc.Algo)
			if err != nil {
				t.Fatal(err)
			}
			opts := fastOptions(t)
			seed := sc.Seed
			opts.Seed, opts.HashAlgo, opts.BlockSize = &seed, algo, sc.BlockSize
			opts.BytesBlockHashes = !sc.IntHashes
			opts.NumBlocks = 16
			opts.LoRAAdapters = []string{"a1", "a2", "a3", "a4", "a5", "a6", "sql-lora"} // sql-lora is lora_id 7
			e := newEngine(t, opts)
			// The generated tokens of req-0 are 109..112, as in the vectors.
			e.filler = []fillerToken{{109, ""}, {110, ""}, {111, ""}, {112, ""}}

			var req0, req1 *request
			var req0Blocks []int
			for _, st := range sc.Steps {
				var events []kvEvent
				switch st.Step {
				case "store_prompt":
					// A prompt of two full blocks is admitted and prefilled in one step.
					req0 = queue(e, seq(101, 8), 5)
					_, events = step(e)
					for _, b := range req0.blocks {
						req0Blocks = append(req0Blocks, b.id)
					}
				case "store_decode_block":
					// Decode steps append 109..112; the step that completes the
					// third block stores it with block 1 as parent.
					for i := 0; i < 4; i++ {
						_, ev := step(e)
						if i < 3 && len(ev) > 0 {
							t.Fatalf("decode step %d: unexpected events %+v", i, ev)
						}
						events = ev
					}
				case "store_lora_salt":
					req1 = queue(e, seq(101, 8), 1)
					req1.lora, req1.salt = "sql-lora", "tenant-a"
					id := e.loraIDs["sql-lora"]
					req1.loraID = &id
					req1.digests = nil
					if err := req1.hashNewBlocks(e.hasher); err != nil {
						t.Fatal(err)
					}
					_, events = step(e)
				case "evict":
					// vLLM's BlockPool.evict_blocks on req-0's first two blocks.
					e.pool.evictBlocks(req0Blocks[:2])
					events = e.pool.takeEvents()
				case "reset":
					// Both requests finished, so every block is free.
					if !e.pool.reset() {
						t.Fatalf("reset failed: running=%d waiting=%d free=%d", len(e.running), len(e.waiting), e.pool.numFree)
					}
					events = e.pool.takeEvents()
				default:
					t.Fatalf("vectors have a step %q this test does not know how to drive", st.Step)
				}
				rank := 0
				b := eventBatch{ts: v.TSUsed, events: events, dpRank: &rank}
				if got := hex.EncodeToString(encodeBatch(nil, &b, false)); got != st.PayloadHex {
					t.Errorf("step %s map layout:\n got %s\nwant %s", st.Step, got, st.PayloadHex)
				}
				if st.LegacyHex != "" {
					if got := hex.EncodeToString(encodeBatch(nil, &b, true)); got != st.LegacyHex {
						t.Errorf("step %s legacy layout:\n got %s\nwant %s", st.Step, got, st.LegacyHex)
					}
				}
			}
			if got := digestsHex(req0.digests); !slices.Equal(got, sc.Digests["req-0"]) {
				t.Errorf("req-0 digests %v, want %v", got, sc.Digests["req-0"])
			}
			if got := digestsHex(req1.digests); !slices.Equal(got, sc.Digests["req-1"]) {
				t.Errorf("req-1 digests %v, want %v", got, sc.Digests["req-1"])
			}
		})
	}
}

// TestMinimalBatchMatchesVLLM encodes the hand-built structs of the
// "minimal" vector: defaulted fields left out, data_parallel_rank nil.
func TestMinimalBatchMatchesVLLM(t *testing.T) {
	v := loadEventVectors(t)
	b := eventBatch{ts: v.TSUsed, events: []kvEvent{
		{kind: kindBlockStored, hashes: []blockHash{{value: 1}, {value: ^uint64(0)}}, tokenIDs: seq(1, 8), blockSize: 4},
		{kind: kindBlockRemoved, hashes: []blockHash{{value: 1}}},
		{kind: kindAllBlocksCleared},
	}}
	if got := hex.EncodeToString(encodeBatch(nil, &b, false)); got != v.Minimal.PayloadHex {
		t.Errorf("minimal:\n got %s\nwant %s", got, v.Minimal.PayloadHex)
	}
}

func TestOffsetEndpointMatchesVLLM(t *testing.T) {
	v := loadEventVectors(t)
	if len(v.EndpointOffsets) == 0 {
		t.Fatal("no endpoint_offsets in vectors")
	}
	for k, want := range v.EndpointOffsets {
		ep, rankStr, ok := strings.Cut(k, " rank ")
		if !ok {
			t.Fatalf("bad key %q", k)
		}
		var rank int
		fmt.Sscan(rankStr, &rank)
		got, err := OffsetEndpoint(ep, rank)
		if err != nil || got != want {
			t.Errorf("OffsetEndpoint(%q, %d) = %q, %v; want %q", ep, rank, got, err, want)
		}
	}
	if got, _ := OffsetEndpoint("tcp://127.0.0.1:0", 2); got != "tcp://127.0.0.1:0" {
		t.Errorf("port 0 offset to %q, want unchanged", got)
	}
	if _, err := OffsetEndpoint("ipc:///tmp/kv", 1); err == nil {
		t.Error("ipc endpoint with rank 1: no error, vLLM raises")
	}
}

func mustHex(t *testing.T, s string) []byte { t.Helper(); return testdata.Unhex(t, s) }

func framesHex(m zmq4.Msg) []string {
	out := make([]string, len(m.Frames))
	for i, f := range m.Frames {
		out[i] = hex.EncodeToString(f)
	}
	return out
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, b
}

// TestZMQFramesMatchVLLMPublisher runs a started engine over real loopback
// sockets: HTTP requests that make vLLM's scheduler store the same blocks as
// the vectors' zmq capture, a SUB socket that must receive the captured
// [topic, seq, payload] frames byte for byte, a DEALER replay that must get
// the captured replies, and kvroute's ingest decoder reading every payload
// into exactly the blocks the engine reports cached.
func TestZMQFramesMatchVLLMPublisher(t *testing.T) {
	v := loadEventVectors(t)
	sec := math.Floor(v.TSUsed)
	ts := time.Unix(int64(sec), int64((v.TSUsed-sec)*1e9))
	opts := fastOptions(t)
	opts.HashAlgo, opts.BlockSize, opts.NumBlocks = blockhash.SHA256CBOR, 4, 64
	opts.MaxNumBatchedTokens = 8 // the 12-token prompt is stored in two chunks: seq 0 and 1
	opts.LoRAAdapters = []string{"a1", "a2", "a3", "a4", "a5", "a6", "sql-lora"}
	opts.EventsEndpoint, opts.ReplayEndpoint, opts.Topic = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", v.ZMQ.Topic
	opts.Now = func() time.Time { return ts }
	e := startEngine(t, opts)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(e.EventsEndpoint()); err != nil {
		t.Fatalf("SUB dial: %v", err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.WaitEventSubscriber(ctx); err != nil {
		t.Fatal(err)
	}

	code, body := postJSON(t, srv.URL+"/v1/completions", `{"model":"test-model","prompt":`+ints(seq(101, 12))+`,"max_tokens":1}`)
	if code != http.StatusOK {
		t.Fatalf("req-0: %d %s", code, body)
	}
	code, body = postJSON(t, srv.URL+"/v1/completions", `{"model":"sql-lora","prompt":`+ints(seq(101, 8))+`,"max_tokens":1,"cache_salt":"tenant-a"}`)
	if code != http.StatusOK {
		t.Fatalf("req-1: %d %s", code, body)
	}

	stored := map[uint64]int{}
	dec := vllmevent.NewDecoder()
	for i, want := range v.ZMQ.Live {
		msg, err := sub.Recv()
		if err != nil {
			t.Fatalf("SUB recv %d: %v", i, err)
		}
		if got := framesHex(msg); !slices.Equal(got, want) {
			t.Fatalf("live message %d:\n got %v\nwant %v", i, got, want)
		}
		if len(msg.Frames) != 3 || string(msg.Frames[0]) != v.ZMQ.Topic || binary.BigEndian.Uint64(msg.Frames[1]) != uint64(i) {
			t.Fatalf("live message %d: frames are not [topic, seq=%d, payload]", i, i)
		}
		var b vllmevent.EventBatch
		if err := dec.Decode(msg.Frames[2], &b); err != nil {
			t.Fatalf("ingest decode %d: %v", i, err)
		}
		if !b.HasRank || b.DataParallelRank != 0 || b.TS != v.TSUsed {
			t.Errorf("batch %d: rank %d/%v ts %v", i, b.DataParallelRank, b.HasRank, b.TS)
		}
		for _, ev := range b.Events {
			for _, h := range ev.BlockHashes {
				switch ev.Type {
				case vllmevent.EventBlockStored:
					stored[eventHashValue(t, h)]++
				case vllmevent.EventBlockRemoved:
					stored[eventHashValue(t, h)]--
				}
			}
		}
	}
	var fromEvents []uint64
	for h, n := range stored {
		for range n {
			fromEvents = append(fromEvents, h)
		}
	}
	slices.Sort(fromEvents)
	if cached := e.CachedBlockHashes(); !slices.Equal(fromEvents, cached) || len(cached) != 5 {
		t.Errorf("blocks from events %v, engine cached %v (want 5 equal)", fromEvents, cached)
	}

	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial(e.ReplayEndpoint()); err != nil {
		t.Fatalf("DEALER dial: %v", err)
	}
	replay := func(sent []string, want [][]string) {
		t.Helper()
		frames := make([][]byte, len(sent))
		for i, s := range sent {
			frames[i] = mustHex(t, s)
		}
		if err := dealer.Send(zmq4.NewMsgFrom(frames...)); err != nil {
			t.Fatalf("DEALER send: %v", err)
		}
		for i, w := range want {
			msg, err := dealer.Recv()
			if err != nil {
				t.Fatalf("DEALER recv %d: %v", i, err)
			}
			if got := framesHex(msg); !slices.Equal(got, w) {
				t.Fatalf("replay reply %d:\n got %v\nwant %v", i, got, w)
			}
		}
	}
	replay(v.ZMQ.ReplayRequest, v.ZMQ.ReplayResponse)
	replay([]string{"", "0000000000000063"}, v.ZMQ.Replay99)
}

// eventHashValue is the 64-bit value of an int-mode event hash.
func eventHashValue(t *testing.T, h blockhash.EventHash) uint64 {
	t.Helper()
	if h.Raw != nil {
		t.Fatalf("event hash %v is bytes, want an int hash", h)
	}
	return h.Value
}

func ints(v []int) string {
	b, _ := json.Marshal(v)
	return string(bytes.TrimSpace(b))
}

// TestStrAndBinHeadersAtEveryWidth: strings and byte strings at the edges
// of msgpack's fix, 8-, 16- and 32-bit length forms decode (with
// vmihailenco/msgpack) to what was encoded, in the smallest form.
func TestStrAndBinHeadersAtEveryWidth(t *testing.T) {
	for _, c := range []struct {
		n              int
		strHdr, binHdr int // header bytes
	}{{0, 1, 2}, {31, 1, 2}, {32, 2, 2}, {255, 2, 2}, {256, 3, 3}, {65535, 3, 3}, {65536, 5, 5}} {
		s := strings.Repeat("x", c.n)
		str := appendStr(nil, s)
		var gotS string
		if err := msgpack.Unmarshal(str, &gotS); err != nil || gotS != s || len(str) != c.n+c.strHdr {
			t.Errorf("str of %d bytes: %d bytes encoded, err %v, round trip %v", c.n, len(str), err, gotS == s)
		}
		bin := appendBin(nil, []byte(s))
		var gotB []byte
		if err := msgpack.Unmarshal(bin, &gotB); err != nil || string(gotB) != s || len(bin) != c.n+c.binHdr {
			t.Errorf("bin of %d bytes: %d bytes encoded, err %v, round trip %v", c.n, len(bin), err, string(gotB) == s)
		}
	}
}
