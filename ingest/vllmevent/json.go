package vllmevent

import (
	"encoding/hex"
	"encoding/json"
)

// batchJSON is the operator-facing JSON form of a batch (`kvroute events
// decode`): field names as vLLM declares them, nil for absent optional fields,
// int hashes as exact JSON integers and bytes hashes as hex strings.
type batchJSON struct {
	TS               float64     `json:"ts"`
	DataParallelRank *int        `json:"data_parallel_rank"`
	Events           []eventJSON `json:"events"`
}

// eventJSON lists every field in vLLM's declaration order; only the ones the
// event type has are set (omitempty on the wrapper pointers).
type eventJSON struct {
	Type            string    `json:"type"`
	BlockHashes     *[]any    `json:"block_hashes,omitempty"`
	ParentBlockHash *any      `json:"parent_block_hash,omitempty"`
	TokenIDs        *[]uint32 `json:"token_ids,omitempty"`
	BlockSize       *int      `json:"block_size,omitempty"`
	LoRAID          *any      `json:"lora_id,omitempty"`
	Medium          *any      `json:"medium,omitempty"`
	LoRAName        *any      `json:"lora_name,omitempty"`
	ExtraKeys       *any      `json:"extra_keys,omitempty"`
	GroupIdx        *any      `json:"group_idx,omitempty"`
	KVCacheSpecKind *any      `json:"kv_cache_spec_kind,omitempty"`
	SlidingWindow   *any      `json:"kv_cache_spec_sliding_window,omitempty"`
	Locality        *any      `json:"locality,omitempty"`
}

// MarshalJSON writes the batch as `kvroute events decode` prints it.
func (b *EventBatch) MarshalJSON() ([]byte, error) {
	out := batchJSON{TS: b.TS, Events: make([]eventJSON, 0, len(b.Events))}
	if b.HasRank {
		r := b.DataParallelRank
		out.DataParallelRank = &r
	}
	for i := range b.Events {
		out.Events = append(out.Events, b.Events[i].jsonView())
	}
	return json.Marshal(out)
}

func (ev *Event) jsonView() eventJSON {
	v := eventJSON{Type: ev.TypeName}
	opt := func(has bool, x any) *any {
		if !has {
			x = nil
		}
		return &x
	}
	hashes := func() *[]any {
		hs := make([]any, len(ev.BlockHashes))
		for i, h := range ev.BlockHashes {
			hs[i] = hashJSON(h.Raw, h.Value)
		}
		return &hs
	}
	switch ev.Type {
	case EventBlockStored:
		v.BlockHashes = hashes()
		v.ParentBlockHash = opt(ev.HasParent, hashJSON(ev.ParentBlockHash.Raw, ev.ParentBlockHash.Value))
		toks := ev.TokenIDs
		if toks == nil {
			toks = []uint32{}
		}
		v.TokenIDs = &toks
		bs := ev.BlockSize
		v.BlockSize = &bs
		v.LoRAID = opt(ev.HasLoRAID, ev.LoRAID)
		v.Medium = opt(ev.HasMedium, ev.Medium)
		v.LoRAName = opt(ev.HasLoRAName, ev.LoRAName)
		var extra any
		if ev.HasExtraKeys {
			entries := make([]any, len(ev.ExtraKeys))
			for i, e := range ev.ExtraKeys {
				if e != nil {
					entries[i] = extraJSON(e)
				}
			}
			extra = entries
		}
		v.ExtraKeys = &extra
		v.GroupIdx = opt(ev.HasGroupIdx, ev.GroupIdx)
		v.KVCacheSpecKind = opt(ev.HasKVCacheSpecKind, ev.KVCacheSpecKind)
		v.SlidingWindow = opt(ev.HasSlidingWindow, ev.SlidingWindow)
		v.Locality = opt(ev.HasLocality, ev.Locality)
	case EventBlockRemoved:
		v.BlockHashes = hashes()
		v.Medium = opt(ev.HasMedium, ev.Medium)
		v.GroupIdx = opt(ev.HasGroupIdx, ev.GroupIdx)
		v.Locality = opt(ev.HasLocality, ev.Locality)
	}
	return v
}

func hashJSON(raw []byte, v uint64) any {
	if raw != nil {
		return hex.EncodeToString(raw)
	}
	return v
}

// extraJSON renders a tuple as an array: str → string, int → number,
// bytes → {"bin": "<hex>"} (so bytes stay distinct from str).
func extraJSON(items []ExtraKey) []any {
	out := make([]any, len(items))
	for i, x := range items {
		switch x.Kind {
		case ExtraStr:
			out[i] = x.Str
		case ExtraInt:
			out[i] = x.Int
		case ExtraBytes:
			out[i] = map[string]string{"bin": hex.EncodeToString(x.Bytes)}
		default:
			out[i] = extraJSON(x.Items)
		}
	}
	return out
}
