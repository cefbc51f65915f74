package ingest

// Test helpers shared with ingest/vllmevent's tests (kept in step with them):
// the golden vectors and a msgpack payload builder.

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvroute/kvroute/internal/testdata"
)

// eventVectors is vLLM's KV-event golden file.
type eventVectors = testdata.KVEventVectors

func loadEventVectors(tb testing.TB) *eventVectors { return testdata.LoadKVEventVectors(tb) }

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// enc builds msgpack test payloads; maps keep insertion order.
func enc(t testing.TB, v ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	for _, x := range v {
		if err := encValue(e, x); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// kv is an ordered msgpack map.
type kv []any

func encValue(e *msgpack.Encoder, v any) error {
	switch v := v.(type) {
	case kv:
		if err := e.EncodeMapLen(len(v) / 2); err != nil {
			return err
		}
		for _, x := range v {
			if err := encValue(e, x); err != nil {
				return err
			}
		}
		return nil
	case []any:
		if err := e.EncodeArrayLen(len(v)); err != nil {
			return err
		}
		for _, x := range v {
			if err := encValue(e, x); err != nil {
				return err
			}
		}
		return nil
	default:
		return e.Encode(v)
	}
}
