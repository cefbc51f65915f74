package vllmevent

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvroute/kvroute/internal/testdata"
)

// eventVectors is vLLM's KV-event golden file.
type eventVectors = testdata.KVEventVectors

func loadEventVectors(tb testing.TB) *eventVectors { return testdata.LoadKVEventVectors(tb) }

var fieldsByType = map[string][]string{
	tagBlockStored:      storedFields,
	tagBlockRemoved:     removedFields,
	tagAllBlocksCleared: nil,
}

// canonicalVector turns a vector's decoded view (events as maps with defaults
// omitted, or as positional arrays) into the shape MarshalJSON prints: every
// field of the type present, null when absent, bytes hashes as hex.
func canonicalVector(t *testing.T, raw json.RawMessage) any {
	t.Helper()
	var batch []any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&batch); err != nil {
		t.Fatal(err)
	}
	var events []any
	for _, e := range batch[1].([]any) {
		m := map[string]any{}
		switch e := e.(type) {
		case map[string]any:
			m = e
		case []any:
			m["type"] = e[0]
			for i, name := range fieldsByType[e[0].(string)] {
				if i+1 < len(e) {
					m[name] = e[i+1]
				}
			}
		}
		typ := m["type"].(string)
		out := map[string]any{"type": typ}
		for _, name := range fieldsByType[typ] {
			out[name] = unbin(m[name])
		}
		events = append(events, out)
	}
	if events == nil {
		events = []any{}
	}
	return map[string]any{"ts": batch[0], "data_parallel_rank": batch[2], "events": events}
}

func unbin(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if h, ok := v["bin"]; ok && len(v) == 1 {
			return h
		}
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = unbin(v[i])
		}
		return out
	}
	return v
}

func jsonOf(t *testing.T, b *EventBatch) any {
	t.Helper()
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDecodeMatchesEveryVectorStepInBothLayouts(t *testing.T) {
	v := loadEventVectors(t)
	n := 0
	for _, sc := range v.Scenarios {
		for _, st := range sc.Steps {
			for _, layout := range []struct {
				name, hex string
				view      json.RawMessage
			}{{"map", st.PayloadHex, st.Decoded}, {"array", st.LegacyHex, st.LegacyDecoded}} {
				b, err := DecodeBatch(unhex(t, layout.hex))
				if err != nil {
					t.Fatalf("%s/%v/%s/%s: %v", sc.Algo, sc.IntHashes, st.Step, layout.name, err)
				}
				got, want := jsonOf(t, b), canonicalVector(t, layout.view)
				if !reflect.DeepEqual(got, want) {
					g, _ := json.Marshal(got)
					w, _ := json.Marshal(want)
					t.Errorf("%s/%v/%s/%s:\n got %s\nwant %s", sc.Algo, sc.IntHashes, st.Step, layout.name, g, w)
				}
				n++
			}
		}
	}
	b, err := DecodeBatch(unhex(t, v.Minimal.PayloadHex))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := jsonOf(t, b), canonicalVector(t, v.Minimal.Decoded); !reflect.DeepEqual(got, want) {
		t.Errorf("minimal: got %v want %v", got, want)
	}
	if b.HasRank {
		t.Errorf("minimal: data_parallel_rank nil decoded as %d", b.DataParallelRank)
	}
	if n != 30 {
		t.Errorf("checked %d payloads, want 30", n)
	}
}

func TestDecodeKeepsFieldsIndexNeeds(t *testing.T) {
	v := loadEventVectors(t)
	// sha256_cbor with bytes hashes, the LoRA + salt step.
	var step = v.Scenarios[2].Steps[2]
	for _, h := range []string{step.PayloadHex, step.LegacyHex} {
		b, err := DecodeBatch(unhex(t, h))
		if err != nil {
			t.Fatal(err)
		}
		ev := b.Events[0]
		if ev.Type != EventBlockStored || ev.HasParent || len(ev.BlockHashes) != 2 || ev.BlockHashes[0].Raw == nil {
			t.Fatalf("bad event %+v", ev)
		}
		if got := bytesEventValue(ev.BlockHashes[0].Raw); ev.BlockHashes[0].Value != got {
			t.Errorf("bytes hash value %d, want %d", ev.BlockHashes[0].Value, got)
		}
		if ev.LoRAName != "sql-lora" || ev.Medium != "GPU" || !ev.HasGroupIdx || ev.GroupIdx != 0 || ev.BlockSize != 4 || len(ev.TokenIDs) != 8 {
			t.Errorf("fields lost: %+v", ev)
		}
		if !ev.HasExtraKeys || len(ev.ExtraKeys) != 2 || len(ev.ExtraKeys[0]) != 2 || ev.ExtraKeys[0][1].Str != "tenant-a" {
			t.Errorf("extra keys lost: %+v", ev.ExtraKeys)
		}
	}
}

// The msgpack payload builders and hex decoding the KV-event tests share.
type kv = testdata.MsgpackMap

func enc(tb testing.TB, v ...any) []byte { tb.Helper(); return testdata.Msgpack(tb, v...) }

func unhex(tb testing.TB, s string) []byte { tb.Helper(); return testdata.Unhex(tb, s) }

func TestDecodeIsForwardAndBackwardCompatible(t *testing.T) {
	stored := func(extra ...any) kv {
		return append(kv{"type", "BlockStored", "block_hashes", []any{uint64(1), uint64(1<<64 - 1)}, "parent_block_hash", nil,
			"token_ids", []any{1, 2, 3, 4, 5, 6, 7, 8}, "block_size", 4, "lora_id", nil, "medium", "GPU", "lora_name", nil}, extra...)
	}
	cases := []struct {
		name    string
		payload []byte
		check   func(t *testing.T, b *EventBatch)
	}{
		{"unknown event type skipped", enc(t, []any{1.5, []any{kv{"type", "BlockPinned", "block_hashes", []any{1}}, stored()}, 0}),
			func(t *testing.T, b *EventBatch) {
				if len(b.Events) != 2 || b.Events[0].Type != EventUnknown || b.Events[0].TypeName != "BlockPinned" || b.Events[1].Type != EventBlockStored {
					t.Errorf("%+v", b.Events)
				}
			}},
		{"future map keys skipped", enc(t, []any{1.5, []any{stored("ownership", "shared", "session_id", "s-1", "locality", "LOCAL")}, 0}),
			func(t *testing.T, b *EventBatch) {
				ev := b.Events[0]
				if ev.Locality != "LOCAL" || len(ev.BlockHashes) != 2 || ev.BlockHashes[1].Value != 1<<64-1 {
					t.Errorf("%+v", ev)
				}
			}},
		{"first-release positional event and 2-element batch", enc(t, []any{1.5, []any{[]any{"BlockStored", []any{7}, nil, []any{1, 2}, 2, nil}, []any{"BlockRemoved", []any{7}}}}),
			func(t *testing.T, b *EventBatch) {
				if b.HasRank || len(b.Events) != 2 || b.Events[0].HasMedium || b.Events[0].HasExtraKeys || b.Events[1].BlockHashes[0].Value != 7 {
					t.Errorf("%+v", b)
				}
			}},
		{"positional event with more fields than known", enc(t, []any{1.5, []any{[]any{"BlockRemoved", []any{7}, "CPU", 0, nil, "owner", "x"}}, 3}),
			func(t *testing.T, b *EventBatch) {
				if b.DataParallelRank != 3 || b.Events[0].Medium != "CPU" {
					t.Errorf("%+v", b)
				}
			}},
		{"fields in any order", enc(t, []any{1.5, []any{kv{"medium", "CPU", "block_hashes", []any{9}, "type", "BlockRemoved"}}, nil}),
			func(t *testing.T, b *EventBatch) {
				if b.Events[0].Type != EventBlockRemoved || b.Events[0].Medium != "CPU" {
					t.Errorf("%+v", b.Events[0])
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := DecodeBatch(c.payload)
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, b)
		})
	}
}

func TestDecodeRejectsMalformedBatches(t *testing.T) {
	cases := map[string][]byte{
		"empty":                 {},
		"garbage":               []byte("not msgpack at all"),
		"not an array":          enc(t, kv{"ts", 1.0}),
		"one element":           enc(t, []any{1.0}),
		"events nil":            enc(t, []any{1.0, nil, 0}),
		"event is a string":     enc(t, []any{1.0, []any{"BlockStored"}, 0}),
		"stored without hashes": enc(t, []any{1.0, []any{kv{"type", "BlockStored", "token_ids", []any{1}}}, 0}),
		"map without type":      enc(t, []any{1.0, []any{kv{"block_hashes", []any{1}}}, 0}),
		"negative hash":         enc(t, []any{1.0, []any{kv{"type", "BlockRemoved", "block_hashes", []any{-1}}}, 0}),
		"string hash":           enc(t, []any{1.0, []any{kv{"type", "BlockRemoved", "block_hashes", []any{"x"}}}, 0}),
		"token out of range":    enc(t, []any{1.0, []any{kv{"type", "BlockStored", "block_hashes", []any{1}, "token_ids", []any{uint64(1 << 40)}}}, 0}),
		"negative token":        enc(t, []any{1.0, []any{kv{"type", "BlockStored", "block_hashes", []any{1}, "token_ids", []any{-3}}}, 0}),
		"huge array header":     {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"trailing bytes":        append(enc(t, []any{1.0, []any{}, 0}), 0xc0),
		"ts NaN":                enc(t, []any{math.NaN(), []any{}, 0}),
		"ts infinite":           enc(t, []any{math.Inf(-1), []any{}, 0}),
	}
	for name, p := range cases {
		if _, err := DecodeBatch(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

func TestDecodeTruncatedVectorsNeverPanic(t *testing.T) {
	v := loadEventVectors(t)
	d := NewDecoder()
	var b EventBatch
	for _, sc := range v.Scenarios {
		for _, st := range sc.Steps {
			p := unhex(t, st.PayloadHex)
			for i := 0; i < len(p); i++ {
				if err := d.Decode(p[:i], &b); err == nil {
					t.Fatalf("%s: prefix of %d/%d bytes decoded", st.Step, i, len(p))
				}
			}
			if err := d.Decode(p, &b); err != nil {
				t.Fatalf("decoder reuse after errors: %v", err)
			}
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	v := loadEventVectors(f)
	for _, sc := range v.Scenarios {
		for _, st := range sc.Steps {
			f.Add(unhex(f, st.PayloadHex))
			f.Add(unhex(f, st.LegacyHex))
		}
	}
	f.Add(unhex(f, v.Minimal.PayloadHex))
	d := NewDecoder()
	f.Fuzz(func(t *testing.T, payload []byte) {
		var b EventBatch
		if err := d.Decode(payload, &b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		if _, err := json.Marshal(&b); err != nil {
			t.Fatalf("decoded batch does not print: %v", err)
		}
	})
}

// nested returns depth one-element arrays (0x91, a byte each) around nil.
func nested(depth int) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth), 0xc0)
}

// TestDecodeSkipsDeepNestingInConstantStack: values the decoder does not
// know are skipped without recursing. msgpack's own Skip recurses a level
// of nesting at a time, and an 8 MiB payload of nested arrays (within the
// default ingest.max_message_bytes of 32 MiB) overflowed the goroutine
// stack: a fatal error that ends the process, which no recover catches.
func TestDecodeSkipsDeepNestingInConstantStack(t *testing.T) {
	deep := nested(8 << 20)
	batch := append([]byte{0x94, 0x00, 0x90, 0x00}, deep...) // [ts, [], rank, <deep>]
	var b EventBatch
	d := NewDecoder()
	if err := d.Decode(batch, &b); err != nil {
		t.Fatalf("extra batch element nested 8M deep: %v", err)
	}
	if err := d.Decode(batch[:len(batch)-1], &b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("the same, truncated: err = %v, want ErrMalformed", err)
	}
	// An unknown map key's value and an unknown positional field, nested.
	mid := nested(1 << 16)
	mapEvent := enc(t, kv{"type", "BlockRemoved", "block_hashes", []any{7}})
	mapEvent[0]++ // one more entry: "future", then the nested value
	mapEvent = append(append(mapEvent, enc(t, "future")...), mid...)
	posEvent := append(enc(t, []any{"BlockRemoved", []any{8}, "GPU", nil, nil}), mid...)
	posEvent[0]++ // one more element: the nested value
	for name, ev := range map[string][]byte{"map": mapEvent, "positional": posEvent} {
		p := append([]byte{0x93, 0x00, 0x91}, ev...)
		p = append(p, 0x00)
		if err := d.Decode(p, &b); err != nil {
			t.Fatalf("%s event with a value nested 64k deep: %v", name, err)
		}
		if len(b.Events) != 1 || b.Events[0].Type != EventBlockRemoved {
			t.Fatalf("%s event: %+v", name, b.Events)
		}
	}
}

// FuzzSkipMatchesMsgpack: the decoder's skip reads past exactly the bytes
// msgpack's Skip does, and fails where it fails (at depths msgpack's
// recursion survives).
func FuzzSkipMatchesMsgpack(f *testing.F) {
	for _, v := range []any{nil, true, 1.5, float32(2), -7, uint64(1 << 63), "str", []byte{1, 2},
		[]any{1, []any{"a", kv{"k", []any{nil}}}}, kv{"a", 1, "b", kv{"c", []byte("d")}},
		&msgpack.RawMessage{0xd4, 0x01, 0x02}} {
		f.Add(enc(f, v))
	}
	f.Add(nested(100))
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0xdb, 0xff, 0xff, 0xff, 0xff, 'x'})
	f.Add([]byte{0xc1})
	d := NewDecoder()
	f.Fuzz(func(t *testing.T, p []byte) {
		d.r.Reset(p)
		d.dec.ResetReader(&d.r)
		err := d.skip()
		left := d.r.Len()
		r := bytes.NewReader(p)
		wantErr := msgpack.NewDecoder(r).Skip()
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("skip err = %v, msgpack's = %v", err, wantErr)
		}
		if err == nil && left != r.Len() {
			t.Fatalf("skip left %d bytes, msgpack's %d", left, r.Len())
		}
	})
}

// decodeAllocs decodes p with a fresh decoder and returns the bytes
// allocated meanwhile and the error.
func decodeAllocs(p []byte) (uint64, error) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	var b EventBatch
	err := NewDecoder().Decode(p, &b)
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc, err
}

// TestDecodeBudgetBoundsWhatABatchAllocates: what a batch decodes into is
// bounded by its payload's size (16 bytes a payload byte, plus 1 MiB), and
// checked before allocating; vLLM's densest batches fit.
func TestDecodeBudgetBoundsWhatABatchAllocates(t *testing.T) {
	const limit = 64 << 20 // what each hostile payload below may allocate
	// 1M events of an unknown type, 3 bytes each: ["x"].
	unknown := []byte{0x93, 0x00, 0xdd, 0x00, 0x10, 0x00, 0x00}
	unknown = append(unknown, bytes.Repeat([]byte{0x91, 0xa1, 'x'}, 1<<20)...)
	unknown = append(unknown, 0x00)
	// One event whose extra_keys hold a tuple of 4M one-byte integers.
	extra := enc(t, kv{"type", "BlockStored", "block_hashes", []any{1}, "extra_keys", nil})
	extra = extra[:len(extra)-1] // drop the nil: the array goes there
	extra = append(extra, 0x91, 0xdd, 0x00, 0x40, 0x00, 0x00)
	extra = append(extra, bytes.Repeat([]byte{0x01}, 4<<20)...)
	extra = append(append([]byte{0x93, 0x00, 0x91}, extra...), 0x00)
	for name, p := range map[string][]byte{"1M unknown events": unknown, "4M-element extra key": extra} {
		alloc, err := decodeAllocs(p)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "decode budget") {
			t.Errorf("%s (%d bytes): err = %v, want the decode budget's", name, len(p), err)
		}
		if alloc > limit {
			t.Errorf("%s (%d bytes): allocated %d bytes", name, len(p), alloc)
		}
	}
	// vLLM's densest layout: 100k one-hash BlockRemoved events, positional.
	ev := enc(t, []any{"BlockRemoved", []any{uint64(1 << 63)}, "GPU", nil, nil})
	dense := append([]byte{0x93, 0x00, 0xdd, 0x00, 0x01, 0x86, 0xa0}, bytes.Repeat(ev, 100_000)...)
	dense = append(dense, 0x00)
	var b EventBatch
	if err := NewDecoder().Decode(dense, &b); err != nil || len(b.Events) != 100_000 {
		t.Fatalf("100k one-hash BlockRemoved events (%d bytes): %d events, err %v", len(dense), len(b.Events), err)
	}
	if per := float64(sizeofEvent+sizeofHash) / float64(len(ev)); per > decodeBudgetPerByte*0.8 {
		t.Errorf("a one-hash BlockRemoved event decodes into %.1f bytes a payload byte, too close to the budget's %d", per, decodeBudgetPerByte)
	}
}
