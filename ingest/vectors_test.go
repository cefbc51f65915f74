package ingest

// Test helpers shared with ingest/vllmevent's tests (kept in step with them):
// the golden vectors and a msgpack payload builder.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvroute/kvroute/internal/shareddata"
)

// eventVectors is the part of vllm_kv_events.json the ingest tests read.
type eventVectors struct {
	Scenarios []struct {
		Algo      string `json:"algo"`
		Seed      string `json:"PYTHONHASHSEED"`
		IntHashes bool   `json:"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"`
		BlockSize int    `json:"block_size"`
		Steps     []struct {
			Step          string          `json:"step"`
			PayloadHex    string          `json:"payload_hex"`
			Decoded       json.RawMessage `json:"payload_decoded"`
			LegacyHex     string          `json:"legacy_array_payload_hex"`
			LegacyDecoded json.RawMessage `json:"legacy_array_payload_decoded"`
		} `json:"steps"`
	} `json:"scenarios"`
	ZMQ struct {
		Topic          string     `json:"topic"`
		Live           [][]string `json:"live_frames_hex"`
		ReplayRequest  []string   `json:"replay_request_frames_sent_by_DEALER_hex"`
		ReplayResponse [][]string `json:"replay_response_frames_received_by_DEALER_hex"`
		Replay99       [][]string `json:"replay_request_start_99_response_hex"`
	} `json:"zmq"`
	Minimal struct {
		PayloadHex string          `json:"payload_hex"`
		Decoded    json.RawMessage `json:"payload_decoded"`
	} `json:"minimal"`
}

func loadEventVectors(tb testing.TB) *eventVectors {
	tb.Helper()
	var v eventVectors
	if err := json.Unmarshal(shareddata.Read(tb, "vectors/vllm_kv_events.json"), &v); err != nil {
		tb.Fatal(err)
	}
	if len(v.Scenarios) == 0 || len(v.ZMQ.Live) == 0 {
		tb.Fatal("vllm_kv_events.json: no scenarios or zmq frames")
	}
	return &v
}

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
