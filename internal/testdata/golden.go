package testdata

import (
	"encoding/json"
	"testing"
)

// The golden files' shapes, declared once for every test that reads them.
// testdata/README.md says what produced each file.

// TypedKey is the vectors' typed JSON for a hash extra key:
// {"t": "str"|"int"|"bytes"(hex)|"tuple"|"list", "v": …}.
type TypedKey struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v"`
}

// BlockHashVectors is vllm/vllm_block_hashes.json: vLLM's block-hash chains.
type BlockHashVectors struct {
	NoneHashTable []struct {
		Algo        string `json:"algo"`
		Seed        string `json:"PYTHONHASHSEED"`
		PreimageHex string `json:"preimage_hex"`
		DigestHex   string `json:"digest_hex"`
	} `json:"none_hash_table"`
	Vectors []struct {
		Case      string `json:"case"`
		Algo      string `json:"algo"`
		Seed      string `json:"PYTHONHASHSEED"`
		BlockSize int    `json:"block_size"`
		Inputs    struct {
			TokenIDs   []uint64        `json:"token_ids"`
			CacheSalt  *string         `json:"cache_salt"`
			LoRAName   *string         `json:"lora_name"`
			MMFeatures json.RawMessage `json:"mm_features"`
			Embeds     *string         `json:"prompt_embeds"`
		} `json:"inputs"`
		NoneHash struct {
			DigestHex string `json:"digest_hex"`
		} `json:"none_hash"`
		Blocks []struct {
			Index       int       `json:"index"`
			TokenRange  [2]int    `json:"token_range"`
			TokenIDs    []uint64  `json:"token_ids"`
			ParentHex   *string   `json:"parent_digest_hex"`
			ExtraKeys   *TypedKey `json:"extra_keys"`
			PreimageHex string    `json:"preimage_hex"`
			DigestHex   string    `json:"digest_hex"`
			EventU64    uint64    `json:"event_hash_u64"`
		} `json:"blocks"`
	} `json:"vectors"`
	CoarseView []struct {
		Algo           string   `json:"algo"`
		Seed           string   `json:"PYTHONHASHSEED"`
		HashBlockSize  int      `json:"hash_block_size"`
		BlockSize      int      `json:"block_size"`
		FineHex        []string `json:"fine_digests_hex"`
		CoarseHex      []string `json:"coarse_digests_hex"`
		CoarseEventU64 []uint64 `json:"coarse_event_hash_u64"`
	} `json:"coarse_view"`
}

// LoadBlockHashVectors reads vllm/vllm_block_hashes.json.
func LoadBlockHashVectors(tb testing.TB) *BlockHashVectors {
	tb.Helper()
	var v BlockHashVectors
	ReadJSON(tb, "vllm/vllm_block_hashes.json", &v)
	if len(v.Vectors) == 0 || len(v.NoneHashTable) == 0 || len(v.CoarseView) == 0 {
		tb.Fatal("testdata: vllm_block_hashes.json: empty sections")
	}
	return &v
}

// LegacyHashVectors is vllm/vllm_block_hashes_legacy.json: sha256_cbor_64bit
// as vLLM <= 0.10.1 computed it.
type LegacyHashVectors struct {
	Vectors []struct {
		Seed      string  `json:"PYTHONHASHSEED"`
		BlockSize int     `json:"block_size"`
		CacheSalt *string `json:"cache_salt"`
		NoneU64   uint64  `json:"none_hash_u64"`
		Blocks    []struct {
			TokenIDs    []uint64  `json:"token_ids"`
			ExtraKeys   *TypedKey `json:"extra_keys"`
			PreimageHex string    `json:"preimage_hex"`
			HashU64     uint64    `json:"hash_u64"`
		} `json:"blocks"`
	} `json:"vectors"`
}

// LoadLegacyHashVectors reads vllm/vllm_block_hashes_legacy.json.
func LoadLegacyHashVectors(tb testing.TB) *LegacyHashVectors {
	tb.Helper()
	var v LegacyHashVectors
	ReadJSON(tb, "vllm/vllm_block_hashes_legacy.json", &v)
	if len(v.Vectors) == 0 {
		tb.Fatal("testdata: vllm_block_hashes_legacy.json: no vectors")
	}
	return &v
}

// KVEventVectors is vllm/vllm_kv_events.json: KV-event payloads from vLLM's
// BlockPool and ZeroMQ frames from its publisher.
type KVEventVectors struct {
	TSUsed    float64 `json:"ts_used"`
	Scenarios []struct {
		Algo      string              `json:"algo"`
		Seed      string              `json:"PYTHONHASHSEED"`
		IntHashes bool                `json:"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"`
		BlockSize int                 `json:"block_size"`
		Digests   map[string][]string `json:"request_block_digests_hex"`
		Steps     []struct {
			Step          string          `json:"step"`
			PayloadHex    string          `json:"payload_hex"`
			Decoded       json.RawMessage `json:"payload_decoded"` // [ts, events, data_parallel_rank]
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
	EndpointOffsets map[string]string `json:"endpoint_offsets"`
}

// LoadKVEventVectors reads vllm/vllm_kv_events.json.
func LoadKVEventVectors(tb testing.TB) *KVEventVectors {
	tb.Helper()
	var v KVEventVectors
	ReadJSON(tb, "vllm/vllm_kv_events.json", &v)
	if len(v.Scenarios) == 0 || len(v.ZMQ.Live) == 0 || v.TSUsed == 0 {
		tb.Fatal("testdata: vllm_kv_events.json: no scenarios, zmq frames or ts")
	}
	return &v
}

// TokenizerCase is one entry of tokenizers/golden/<name>.json: the ids the
// Hugging Face tokenizers library gives Text with and without special tokens.
type TokenizerCase struct {
	Text        string `json:"text"`
	WithSpecial []int  `json:"with_special"`
	NoSpecial   []int  `json:"no_special"`
}

// TokenizerTexts reads tokenizers/cases.json, the inputs of the goldens.
func TokenizerTexts(tb testing.TB) []string {
	tb.Helper()
	var texts []string
	ReadJSON(tb, "tokenizers/cases.json", &texts)
	return texts
}

// TokenizerGolden reads tokenizers/golden/<name>.json and checks that its
// texts are cases.json's, in order.
func TokenizerGolden(tb testing.TB, name string) []TokenizerCase {
	tb.Helper()
	var cases []TokenizerCase
	ReadJSON(tb, "tokenizers/golden/"+name+".json", &cases)
	texts := TokenizerTexts(tb)
	if len(texts) != len(cases) {
		tb.Fatalf("testdata: golden %s has %d entries, cases.json %d", name, len(cases), len(texts))
	}
	for i := range texts {
		if texts[i] != cases[i].Text {
			tb.Fatalf("testdata: golden %s[%d] text differs from cases.json", name, i)
		}
	}
	return cases
}

// ChatGolden is one entry of tokenizers/chat_golden.json: conversation Conv
// rendered with Model's own chat template (Text, or Err when Jinja2 raised)
// and encoded without special tokens (IDs).
type ChatGolden struct {
	Model string  `json:"model"`
	Conv  string  `json:"conv"`
	Text  *string `json:"text"`
	Err   *string `json:"err"`
	IDs   []int   `json:"ids"`
}

// ChatGoldens reads tokenizers/chat_golden.json.
func ChatGoldens(tb testing.TB) []ChatGolden {
	tb.Helper()
	var g []ChatGolden
	ReadJSON(tb, "tokenizers/chat_golden.json", &g)
	if len(g) == 0 {
		tb.Fatal("testdata: chat_golden.json is empty")
	}
	return g
}

// Conversations returns chat_templates/conversations.json, raw (the
// chat-template engine decodes it with its own JSON decoder).
func Conversations(tb testing.TB) []byte {
	tb.Helper()
	return Read(tb, "chat_templates/conversations.json")
}

// Jinja2Render is Jinja2's result for one "<template>|<conversation>" pair:
// the output, or the error it raised.
type Jinja2Render struct {
	Out *string `json:"out"`
	Err *string `json:"err"`
}

// Jinja2Renders reads chat_templates/jinja2_renders.json.
func Jinja2Renders(tb testing.TB) map[string]Jinja2Render {
	tb.Helper()
	var r map[string]Jinja2Render
	ReadJSON(tb, "chat_templates/jinja2_renders.json", &r)
	if len(r) == 0 {
		tb.Fatal("testdata: jinja2_renders.json is empty")
	}
	return r
}
