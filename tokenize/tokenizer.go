// Package tokenize turns text into the token ids a model's Hugging Face
// tokenizer produces, in pure Go: it reads tokenizer.json (and
// tokenizer_config.json for the transformers class rules and the chat
// template) and encodes exactly as the Rust `tokenizers` library does.
//
// Only the components current decoder-only LLMs use are supported (BPE with
// byte-level or SentencePiece-style vocabularies); anything else is rejected
// at load time with an error naming the component, never guessed. See
// docs/TOKENIZER.md for the list.
package tokenize

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// ErrUnsupported marks a tokenizer.json component (model, normalizer,
// pre-tokenizer, post-processor, or an option of one) that this package does
// not implement. Callers fail open on it.
var ErrUnsupported = errors.New("unsupported tokenizer component")

// Tokenizer encodes text into token ids for one model. It is immutable after
// Load apart from its bounded word cache and safe for concurrent use.
type Tokenizer struct {
	normalizer   normalizer   // nil: none
	preTokenizer preTokenizer // nil: the whole segment is one word
	model        *bpeModel
	addedRaw     *addedMatcher // added tokens matched on raw text (normalized:false)
	addedNorm    *addedMatcher // added tokens matched on normalized text (normalized:true)
	post         template      // ids around the sequence when addSpecialTokens is set
	config       TokenizerConfig
	classRule    string        // the transformers class rule applied, "" if none
	segments     *segmentCache // nil: disabled
}

// Options changes how Load builds a Tokenizer. The zero value is what vLLM
// (through transformers) does.
type Options struct {
	// IgnoreClassRules keeps tokenizer.json's own post-processor even where
	// transformers would rebuild it from tokenizer_config.json (for example
	// LlamaTokenizerFast with add_bos_token). Encoding then equals the Rust
	// tokenizers library's, which is what the golden files record.
	IgnoreClassRules bool
	// SegmentCacheBytes bounds the cache of whole segments (the text
	// between added tokens, such as each message of a rendered chat
	// prompt): 0 means DefaultSegmentCacheBytes, a negative value turns
	// the cache off. The cache never changes the ids, only the time.
	SegmentCacheBytes int
}

// Load reads path/tokenizer.json and, when present, path/tokenizer_config.json
// and builds a Tokenizer that encodes as vLLM does. path may also name the
// tokenizer.json file itself; tokenizer_config.json is then looked for beside it.
func Load(path string) (*Tokenizer, error) {
	return LoadWithOptions(path, Options{})
}

// LoadWithOptions is Load with explicit Options.
func LoadWithOptions(path string, opts Options) (*Tokenizer, error) {
	tokPath, cfgPath := path, ""
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		tokPath = filepath.Join(path, "tokenizer.json")
		cfgPath = filepath.Join(path, "tokenizer_config.json")
	} else {
		cfgPath = filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	}
	tokJSON, err := os.ReadFile(tokPath)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	var cfgJSON []byte
	if b, err := os.ReadFile(cfgPath); err == nil {
		cfgJSON = b
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	t, err := Parse(tokJSON, cfgJSON, opts)
	if err != nil {
		return nil, fmt.Errorf("tokenize %s: %w", path, err)
	}
	return t, nil
}

// Parse builds a Tokenizer from the contents of tokenizer.json and
// tokenizer_config.json (nil or empty when there is none).
func Parse(tokenizerJSON, configJSON []byte, opts Options) (*Tokenizer, error) {
	var cfg TokenizerConfig
	if len(configJSON) > 0 {
		c, err := parseConfig(configJSON)
		if err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
		cfg = c
	}
	t, err := build(tokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	t.config = cfg
	switch {
	case opts.SegmentCacheBytes == 0:
		t.segments = newSegmentCache(DefaultSegmentCacheBytes)
	case opts.SegmentCacheBytes > 0:
		t.segments = newSegmentCache(opts.SegmentCacheBytes)
	}
	if !opts.IgnoreClassRules {
		if err := t.applyClassRules(); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	return t, nil
}

// Config returns what tokenizer_config.json says (zero values when absent).
func (t *Tokenizer) Config() TokenizerConfig { return t.config }

// ClassRule names the transformers tokenizer-class rule that rebuilt the
// post-processor at load ("" when tokenizer.json's own is used).
func (t *Tokenizer) ClassRule() string { return t.classRule }

// TokenID returns the id of a token (an added token or a vocabulary entry,
// as tokenizer.json spells it) and whether it exists.
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if id, ok := t.addedRaw.ids[token]; ok {
		return id, true
	}
	if id, ok := t.addedNorm.ids[token]; ok {
		return id, true
	}
	id, ok := t.model.rawVocab.get(token)
	return id, ok
}

// Encode returns the token ids of text. With addSpecialTokens the
// post-processor's special tokens (BOS and the like) are added, as
// `tokenizer(text)` does in transformers; special tokens written in text are
// always recognised, as vLLM does. Invalid UTF-8 is read as U+FFFD.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) []int {
	return t.AppendEncode(make([]int, 0, len(text)/4+len(t.post.prefix)+len(t.post.suffix)+1), text, addSpecialTokens)
}

// AppendEncode is Encode appending the ids to dst, so a caller can reuse
// one buffer across requests. The tokenizer keeps no reference to dst.
func (t *Tokenizer) AppendEncode(dst []int, text string, addSpecialTokens bool) []int {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	ids := dst
	if addSpecialTokens {
		ids = append(ids, t.post.prefix...)
	}
	st := getScratch()
	ids = t.encodeText(ids, text, st)
	putScratch(st)
	if addSpecialTokens {
		ids = append(ids, t.post.suffix...)
	}
	return ids
}

// encodeText appends the ids of text without post-processing: added tokens
// are split off the raw text, the rest is normalized, split off the
// normalized added tokens, pre-tokenized and run through the model.
// Order as in tokenizers' AddedVocabulary::extract_and_normalize (v0.22).
func (t *Tokenizer) encodeText(ids []int, text string, st *scratch) []int {
	t.addedRaw.split(text, func(start, end, id int) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		seg, atStart := text[start:end], start == 0
		if t.segments == nil || !t.segments.cacheable(seg) {
			ids = t.encodeSegment(ids, seg, atStart, st)
			return
		}
		hit, key, ok := t.segments.get(seg, atStart)
		if ok {
			n := len(ids)
			ids = slices.Grow(ids, len(hit))[:n+len(hit)]
			widen(ids[n:], hit)
			return
		}
		from := len(ids)
		ids = t.encodeSegment(ids, seg, atStart, st)
		t.segments.put(key, seg, atStart, ids[from:])
	})
	return ids
}

// widen copies src into dst (as long), four ids a step.
func widen(dst []int, src []int32) {
	dst = dst[:len(src)]
	i := 0
	for ; i+4 <= len(src); i += 4 {
		s, d := src[i:i+4:i+4], dst[i:i+4:i+4]
		d[0], d[1], d[2], d[3] = int(s[0]), int(s[1]), int(s[2]), int(s[3])
	}
	for ; i < len(src); i++ {
		dst[i] = int(src[i])
	}
}

func (t *Tokenizer) encodeSegment(ids []int, seg string, atStart bool, st *scratch) []int {
	if t.normalizer != nil {
		seg, atStart = normalizeAt(t.normalizer, seg, atStart)
	}
	if seg == "" {
		return ids
	}
	if t.addedNorm.empty() {
		return t.encodeWords(ids, seg, atStart, st)
	}
	t.addedNorm.split(seg, func(start, end, id int) {
		if id >= 0 {
			ids = append(ids, id)
			return
		}
		ids = t.encodeWords(ids, seg[start:end], atStart && start == 0, st)
	})
	return ids
}

func (t *Tokenizer) encodeWords(ids []int, s string, atStart bool, st *scratch) []int {
	if t.preTokenizer == nil {
		return t.model.encodeWord(ids, s, st)
	}
	words := t.preTokenizer.split(st.words[:0], piece{s, atStart}, st)
	if len(words) >= parallelMinWords {
		ids = t.model.encodeWordListParallel(ids, words, st)
	} else {
		ids = t.model.encodeWordList(ids, words, st)
	}
	st.words = words[:0]
	return ids
}

// encodeWordList appends the ids of pre-tokenized words.
func (b *bpeModel) encodeWordList(ids []int, words []piece, st *scratch) []int {
	var h uint64 // words[k]'s word-cache hash, when hashed
	hashed, cold := false, false
	for k, w := range words {
		var hNext uint64
		hashedNext := false
		if cold && k+1 < len(words) && len(words[k+1].s) <= maxCachedWordBytes {
			// In a run of words the scratch has not seen, ask for the next
			// word's slot of the shared word cache now: the work on this
			// word hides what is otherwise a cache miss a word.
			hNext, hashedNext = b.cache.hash(words[k+1].s), true
			b.cache.prefetch(hNext)
		}
		ids, cold = b.encodeWordHashed(ids, w.s, h, hashed, st)
		h, hashed = hNext, hashedNext
	}
	return ids
}
