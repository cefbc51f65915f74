package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel is the BPE model of tokenizer.json. Words reach it as raw text:
// for byte-level tokenizers its vocabulary is keyed by the bytes a token
// stands for (the GPT-2 byte-to-unicode mapping undone at load), so no
// per-request mapping is needed. tokenizers models/bpe/model.rs (v0.22).
type bpeModel struct {
	byteLevel    bool
	vocab        map[string]int // keyed by model-space text (raw bytes when byteLevel)
	rawVocab     map[string]int // as written in tokenizer.json
	merges       map[uint64]mergeTarget
	ignoreMerges bool
	byteFallback bool
	fallbackIDs  [256]int // ids of <0xXX>, -1 when absent
	byteIDs      [256]int // byteLevel: id of each single byte, -1 when absent
	unkID        int      // -1: no unk token
	fuseUnk      bool
	cache        *wordCache
}

type mergeTarget struct {
	rank int32
	id   int32
}

func pairKey(a, b int) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func buildBPE(m *modelJSON, byteLevel bool) (*bpeModel, error) {
	if m.Type == "" && m.Vocab != nil && m.Merges != nil {
		m.Type = "BPE"
	}
	if m.Type != "BPE" {
		return nil, fmt.Errorf("%w: model type %q", ErrUnsupported, m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("%w: BPE dropout %v (must be null)", ErrUnsupported, *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("%w: BPE continuing_subword_prefix %q", ErrUnsupported, *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("%w: BPE end_of_word_suffix %q", ErrUnsupported, *m.EndOfWordSuffix)
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("model: empty vocab")
	}
	b := &bpeModel{
		byteLevel:    byteLevel,
		rawVocab:     m.Vocab,
		ignoreMerges: m.IgnoreMerges,
		byteFallback: m.ByteFallback,
		unkID:        -1,
		fuseUnk:      m.FuseUnk,
		cache:        newWordCache(),
	}
	if byteLevel {
		b.vocab = make(map[string]int, len(m.Vocab))
		for tok, id := range m.Vocab {
			if raw, ok := byteLevelDecode(tok); ok {
				b.vocab[raw] = id
			}
		}
	} else {
		b.vocab = m.Vocab
	}
	for i := range b.byteIDs {
		b.byteIDs[i], b.fallbackIDs[i] = -1, -1
		if id, ok := b.vocab[string([]byte{byte(i)})]; ok && byteLevel {
			b.byteIDs[i] = id
		}
		if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.fallbackIDs[i] = id
		}
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q not in vocab", *m.UnkToken)
		}
		b.unkID = id
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	b.merges = make(map[uint64]mergeTarget, len(merges))
	for rank, mg := range merges {
		a, ok1 := m.Vocab[mg[0]]
		c, ok2 := m.Vocab[mg[1]]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("model: merges[%d] %q %q: token not in vocab", rank, mg[0], mg[1])
		}
		n, ok := m.Vocab[mg[0]+mg[1]]
		if !ok {
			return nil, fmt.Errorf("model: merges[%d]: merged token %q not in vocab", rank, mg[0]+mg[1])
		}
		b.merges[pairKey(a, c)] = mergeTarget{int32(rank), int32(n)}
	}
	return b, nil
}

// parseMerges reads merges as "a b" strings or ["a", "b"] pairs.
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("model merges: %w", err)
	}
	out := make([][2]string, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) > 0 && it[0] == '"' {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return nil, fmt.Errorf("model merges[%d]: %w", i, err)
			}
			parts := strings.Split(s, " ")
			if len(parts) != 2 {
				return nil, fmt.Errorf("model merges[%d]: %q is not two space-separated tokens", i, s)
			}
			out[i] = [2]string{parts[0], parts[1]}
			continue
		}
		var p []string
		if err := json.Unmarshal(it, &p); err != nil || len(p) != 2 {
			return nil, fmt.Errorf("model merges[%d]: want \"a b\" or [\"a\", \"b\"]", i)
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

// byteLevelDecode maps a byte-level token (GPT-2's printable stand-ins for
// bytes) back to the bytes it stands for; false when it holds a character
// outside the mapping (such a token cannot come out of byte-level words).
func byteLevelDecode(tok string) (string, bool) {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := unicodeToByte(r)
		if !ok {
			return "", false
		}
		out = append(out, b)
	}
	return string(out), true
}

// unicodeToByte inverts GPT-2's bytes_to_unicode: printable Latin-1 bytes
// stand for themselves, the other 68 bytes for U+0100.. in byte order.
func unicodeToByte(r rune) (byte, bool) {
	if printableByte(r) {
		return byte(r), true
	}
	if r < 0x100 || r >= 0x100+68 {
		return 0, false
	}
	n := int(r - 0x100)
	for b := 0; b < 256; b++ {
		if !printableByte(rune(b)) {
			if n == 0 {
				return byte(b), true
			}
			n--
		}
	}
	return 0, false
}

func printableByte(r rune) bool {
	return (r >= '!' && r <= '~') || (r >= 0xA1 && r <= 0xAC) || (r >= 0xAE && r <= 0xFF)
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	dead       bool
	// pairRank and pairID are the merge of this symbol with its successor
	// (noMerge when there is none), kept by mergeSmall so each pair is
	// looked up in the merges map once, not once per round.
	pairRank, pairID int32
}

// noMerge is the pairRank of a symbol whose pair with its successor has no merge.
const noMerge = int32(1<<31 - 1)

type mergeItem struct {
	rank, pos, id int32
}

// encodeWord appends the ids of one pre-tokenized word.
func (b *bpeModel) encodeWord(ids []int, w string, st *scratch) []int {
	if w == "" {
		return ids
	}
	if b.ignoreMerges {
		if id, ok := b.vocab[w]; ok {
			return append(ids, id)
		}
	}
	cacheable := len(w) <= maxCachedWordBytes
	if cacheable {
		if hit, ok := b.cache.get(w); ok {
			return append(ids, hit...)
		}
	}
	start := len(ids)
	ids = b.merge(ids, w, st)
	if cacheable {
		b.cache.put(w, ids[start:])
	}
	return ids
}

// initialSymbols fills st.syms with the word's characters (bytes for
// byte-level models), with byte fallback and unknown-token handling.
func (b *bpeModel) initialSymbols(w string, st *scratch) []symbol {
	syms := st.syms[:0]
	add := func(id int) {
		syms = append(syms, symbol{id: int32(id)})
	}
	// Unknown characters become unk_token, consecutive ones fused into one
	// when fuse_unk is set; none at all without an unk_token.
	unkPending := false
	known := func(id int) {
		if unkPending {
			add(b.unkID)
			unkPending = false
		}
		add(id)
	}
	unknown := func() {
		switch {
		case b.unkID < 0:
		case !unkPending:
			unkPending = true
		case !b.fuseUnk:
			add(b.unkID)
		}
	}
	if b.byteLevel {
		for i := 0; i < len(w); i++ {
			if id := b.byteIDs[w[i]]; id >= 0 {
				known(id)
			} else {
				unknown()
			}
		}
	} else {
		for i := 0; i < len(w); {
			_, n := utf8.DecodeRuneInString(w[i:])
			ch := w[i : i+n]
			i += n
			if id, ok := b.vocab[ch]; ok {
				known(id)
			} else if b.byteFallback && b.allFallback(ch) {
				known(b.fallbackIDs[ch[0]])
				for j := 1; j < len(ch); j++ {
					add(b.fallbackIDs[ch[j]])
				}
			} else {
				unknown()
			}
		}
	}
	if unkPending {
		add(b.unkID)
	}
	return syms
}

// allFallback reports whether every byte of ch has a <0xXX> token.
func (b *bpeModel) allFallback(ch string) bool {
	for j := 0; j < len(ch); j++ {
		if b.fallbackIDs[ch[j]] < 0 {
			return false
		}
	}
	return true
}

// merge applies the merges to a word, lowest rank first and leftmost among
// equal ranks, as tokenizers' Word::merge_all does with its priority queue.
func (b *bpeModel) merge(ids []int, w string, st *scratch) []int {
	syms := b.initialSymbols(w, st)
	n := len(syms)
	for i := range syms {
		syms[i].prev, syms[i].next = int32(i-1), int32(i+1)
	}
	if n > 0 {
		syms[n-1].next = -1
	}
	if n <= 48 {
		b.mergeSmall(syms, st.pairCacheFor(b))
	} else {
		b.mergeHeap(syms, st)
	}
	for i := 0; i >= 0 && n > 0; i = int(syms[i].next) {
		ids = append(ids, int(syms[i].id))
	}
	st.syms = syms[:0]
	return ids
}

// mergeSmall finds the best pair by scanning: faster than a heap for the
// short words that make up nearly all text. Each pair's merge is looked up
// once and cached in its left symbol; a join looks up only the two pairs it
// changed (the merges map is large, so each lookup is a likely cache miss).
func (b *bpeModel) mergeSmall(syms []symbol, pc *pairCache) {
	if len(syms) < 2 {
		return
	}
	for i := int32(0); syms[i].next >= 0; i = syms[i].next {
		b.pairOf(syms, i, pc)
	}
	syms[len(syms)-1].pairRank = noMerge
	for {
		best, bestRank := int32(-1), noMerge
		for i := int32(0); i >= 0; i = syms[i].next {
			if r := syms[i].pairRank; r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			return
		}
		b.join(syms, best, syms[best].pairID)
		b.pairOf(syms, best, pc)
		if p := syms[best].prev; p >= 0 {
			b.pairOf(syms, p, pc)
		}
	}
}

// pairOf caches in syms[i] the merge of symbol i with its successor.
func (b *bpeModel) pairOf(syms []symbol, i int32, pc *pairCache) {
	syms[i].pairRank = noMerge
	nx := syms[i].next
	if nx < 0 {
		return
	}
	if m, ok := b.mergeOf(pc, syms[i].id, syms[nx].id); ok {
		syms[i].pairRank, syms[i].pairID = m.rank, m.id
	}
}

// join merges symbol i with its successor into id.
func (b *bpeModel) join(syms []symbol, i, id int32) {
	nx := syms[i].next
	syms[i].id = id
	syms[i].next = syms[nx].next
	syms[nx].dead = true
	if syms[nx].next >= 0 {
		syms[syms[nx].next].prev = i
	}
}

func (b *bpeModel) mergeHeap(syms []symbol, st *scratch) {
	h := st.heap[:0]
	push := func(it mergeItem) {
		h = append(h, it)
		for j := len(h) - 1; j > 0; {
			p := (j - 1) / 2
			if !itemLess(h[j], h[p]) {
				break
			}
			h[j], h[p] = h[p], h[j]
			j = p
		}
	}
	pop := func() mergeItem {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for j := 0; ; {
			l, r, m := 2*j+1, 2*j+2, j
			if l < len(h) && itemLess(h[l], h[m]) {
				m = l
			}
			if r < len(h) && itemLess(h[r], h[m]) {
				m = r
			}
			if m == j {
				break
			}
			h[j], h[m] = h[m], h[j]
			j = m
		}
		return top
	}
	pairAt := func(i int32) {
		nx := syms[i].next
		if nx < 0 {
			return
		}
		if m, ok := b.merges[pairKey(int(syms[i].id), int(syms[nx].id))]; ok {
			push(mergeItem{m.rank, i, m.id})
		}
	}
	for i := int32(0); i < int32(len(syms)); i++ {
		pairAt(i)
	}
	for len(h) > 0 {
		it := pop()
		s := syms[it.pos]
		if s.dead || s.next < 0 {
			continue
		}
		m, ok := b.merges[pairKey(int(s.id), int(syms[s.next].id))]
		if !ok || m.id != it.id {
			continue
		}
		b.join(syms, it.pos, it.id)
		if p := syms[it.pos].prev; p >= 0 {
			pairAt(p)
		}
		pairAt(it.pos)
	}
	st.heap = h[:0]
}

func itemLess(a, b mergeItem) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// scratch holds per-call buffers, pooled so Encode allocates little.
type scratch struct {
	words      []piece
	seqA, seqB []piece
	spans      []span
	syms       []symbol
	heap       []mergeItem
	pairs      *pairCache // lazily allocated; see pairCacheFor
}

// pairCacheBits sizes pairCache: 2^11 slots of 16 bytes (32 KiB) stay in the
// CPU cache, where the merges map (~150k entries) does not.
const pairCacheBits = 11

// pairCache is a direct-mapped cache of merges-map answers (hits and misses)
// in front of one model's merges map. Words share most of their pairs, so
// BPE on words the word cache has not seen mostly hits here instead of
// missing the CPU cache on the map. It is exact: a slot holds its full key.
type pairCache struct {
	owner *bpeModel
	slots [1 << pairCacheBits]pairSlot
}

type pairSlot struct {
	key      uint64 // pairKey, or noPair when empty
	rank, id int32  // rank noMerge: the pair has no merge
}

// noPair is no pairKey of two token ids (ids are below 2^31).
const noPair = ^uint64(0)

// pairCacheFor returns the scratch's pair cache, emptied when it last served
// another model (the scratch pool is shared by every tokenizer).
func (st *scratch) pairCacheFor(b *bpeModel) *pairCache {
	if st.pairs == nil {
		st.pairs = new(pairCache)
	}
	if pc := st.pairs; pc.owner != b {
		pc.owner = b
		for i := range pc.slots {
			pc.slots[i] = pairSlot{key: noPair}
		}
	}
	return st.pairs
}

// mergeOf is b.merges[pairKey(a, c)] through the pair cache.
func (b *bpeModel) mergeOf(pc *pairCache, a, c int32) (mergeTarget, bool) {
	k := pairKey(int(a), int(c))
	sl := &pc.slots[(k*0x9E3779B97F4A7C15)>>(64-pairCacheBits)]
	if sl.key == k {
		return mergeTarget{sl.rank, sl.id}, sl.rank != noMerge
	}
	m, ok := b.merges[k]
	if !ok {
		m = mergeTarget{rank: noMerge}
	}
	*sl = pairSlot{key: k, rank: m.rank, id: m.id}
	return m, ok
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

func getScratch() *scratch   { return scratchPool.Get().(*scratch) }
func putScratch(st *scratch) { scratchPool.Put(st) }
