package blockhash

// Value is one element of a block's extra-keys tuple as vLLM builds it: a str
// (LoRA name, cache_salt, multimodal identifier), an int (a multimodal offset),
// bytes (a prompt-embeds digest) or a tuple (a multimodal (identifier, offset)
// pair). A block's extra keys are a []Value; nil or empty means Python None.
type Value struct {
	kind  valueKind
	str   string
	num   int64
	raw   []byte
	items []Value
}

type valueKind uint8

const (
	kindStr valueKind = iota + 1
	kindInt
	kindBytes
	kindTuple
)

// Str is a Python str extra key.
func Str(s string) Value { return Value{kind: kindStr, str: s} }

// Int is a Python int extra key.
func Int(n int64) Value { return Value{kind: kindInt, num: n} }

// Bytes is a Python bytes extra key.
func Bytes(b []byte) Value { return Value{kind: kindBytes, raw: b} }

// Tuple is a Python tuple extra key.
func Tuple(items ...Value) Value { return Value{kind: kindTuple, items: items} }

// RequestKeys are the extra keys the request path knows: the LoRA adapter name
// (vLLM adds it to every block) and the cache_salt (block 0 only, when not empty).
type RequestKeys struct {
	LoRAName  string
	CacheSalt string
}

// blockExtra appends block i's extra keys in vLLM's order: LoRA, (multimodal),
// cache_salt — generate_block_hash_extra_keys in vllm/v1/core/kv_cache_utils.py.
func (rk RequestKeys) blockExtra(dst []Value, block int) []Value {
	dst = dst[:0]
	if rk.LoRAName != "" {
		dst = append(dst, Str(rk.LoRAName))
	}
	if block == 0 && rk.CacheSalt != "" {
		dst = append(dst, Str(rk.CacheSalt))
	}
	return dst
}
