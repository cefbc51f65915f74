package vllmemu

import (
	"sync/atomic"
	"time"

	"github.com/kvroute/kvroute/blockhash"
)

// request is one generation request inside the engine. The scheduler owns
// every field but aborted and out.
type request struct {
	id        string
	tokens    []int // prompt, then generated tokens
	promptLen int
	maxTokens int
	lora      string
	loraID    *int64
	salt      string
	digests   []blockhash.Digest // one per full block of tokens

	blocks      []*block
	numCached   int // leading blocks registered in the prefix cache
	numComputed int // tokens whose KV is computed (or hit)
	hitTokens   int // prefix-cache hit at first admission
	admitted    bool
	outputs     int
	arrival     time.Time
	scheduled   time.Time // first admission (vLLM's scheduled_ts)
	firstToken  time.Time

	out     chan output     // buffered for every output, so sends never block; nil in a Virtual engine
	virt    *VirtualRequest // the Virtual engine's handle, nil otherwise
	aborted atomic.Bool
}

// output is one generated token as the HTTP side streams it.
type output struct {
	text         string
	cachedTokens int
	done         bool
	err          error
}

// extraKeys is block i's extra-key tuple as BlockStored lists it: the LoRA
// name on every block, the cache salt on block 0 (vllm/v1/core/kv_cache_utils.py
// generate_block_hash_extra_keys, upstream main 5ac26849); nil means None.
func (r *request) extraKeys(i int) []string {
	var k []string
	if r.lora != "" {
		k = append(k, r.lora)
	}
	if i == 0 && r.salt != "" {
		k = append(k, r.salt)
	}
	return k
}

func (r *request) blockExtra(i int) []blockhash.Value {
	var v []blockhash.Value
	for _, s := range r.extraKeys(i) {
		v = append(v, blockhash.Str(s))
	}
	return v
}

// hashNewBlocks extends digests over every newly full block of tokens, as
// vLLM's request block hasher does when tokens are appended.
func (r *request) hashNewBlocks(e *blockhash.Engine) error {
	bs := e.BlockSize()
	for i := len(r.digests); (i+1)*bs <= len(r.tokens); i++ {
		parent := e.NoneHash()
		if i > 0 {
			parent = r.digests[i-1]
		}
		d, err := blockhash.HashBlock(e, parent, r.tokens[i*bs:(i+1)*bs], r.blockExtra(i))
		if err != nil {
			return err
		}
		r.digests = append(r.digests, d)
	}
	return nil
}
