package vllmevent

// The wire contract with vLLM, in one place.

// Event tags: vLLM's class names (vllm/distributed/kv_events.py, upstream main 5ac26849).
const (
	tagBlockStored      = "BlockStored"
	tagBlockRemoved     = "BlockRemoved"
	tagAllBlocksCleared = "AllBlocksCleared"
)

// Event field names in declaration order (the map layout's keys).
const (
	fType            = "type"
	fBlockHashes     = "block_hashes"
	fParentBlockHash = "parent_block_hash"
	fTokenIDs        = "token_ids"
	fBlockSize       = "block_size"
	fLoRAID          = "lora_id"
	fMedium          = "medium"
	fLoRAName        = "lora_name"
	fExtraKeys       = "extra_keys"
	fGroupIdx        = "group_idx"
	fKVCacheSpecKind = "kv_cache_spec_kind"
	fSlidingWindow   = "kv_cache_spec_sliding_window"
	fLocality        = "locality"
)

// Media vLLM reports (others exist: STORAGE, older FS/OBJ).
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU"
)

// internedStrings are decoded without allocating.
var internedStrings = []string{MediumGPU, MediumCPU, "full_attention", "LOCAL", "REMOTE", "STORAGE",
	tagBlockStored, tagBlockRemoved, tagAllBlocksCleared}
