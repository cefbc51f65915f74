package ingest

// Test helpers: the golden vectors and the msgpack payload builder (one
// implementation in internal/testdata, shared with ingest/vllmevent).

import (
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// eventVectors is vLLM's KV-event golden file.
type eventVectors = testdata.KVEventVectors

func loadEventVectors(tb testing.TB) *eventVectors { return testdata.LoadKVEventVectors(tb) }

// The msgpack payload builders and hex decoding the KV-event tests share.
type kv = testdata.MsgpackMap

func enc(tb testing.TB, v ...any) []byte { tb.Helper(); return testdata.Msgpack(tb, v...) }

func unhex(tb testing.TB, s string) []byte { tb.Helper(); return testdata.Unhex(tb, s) }
