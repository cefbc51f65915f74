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
	vocab        *vocabTable // keyed by model-space text (raw bytes when byteLevel)
	rawVocab     *vocabTable // as written in tokenizer.json (vocab itself when not byteLevel)
	merges       *mergeTable
	ignoreMerges bool
	byteFallback bool
	fallbackIDs  [256]int32 // ids of <0xXX>, -1 when absent
	byteIDs      [256]int32 // byteLevel: id of each single byte, -1 when absent
	allBytes     bool       // byteLevel and every byte has an id
	unkID        int        // -1: no unk token
	fuseUnk      bool
	cache        *wordCache
	// bytePairRanks, when allBytes, holds the merge rank of every pair of
	// single-byte tokens at first<<8|second (noMerge when none): a word's
	// first pairs, from 256 KiB where those of common text share a few
	// cache lines, where the pair cache spreads them over as many lines as
	// pairs and hashes each.
	bytePairRanks []int32
}

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
	for tok, id := range m.Vocab {
		if id < 0 || id >= maxMergeID {
			return nil, fmt.Errorf("%w: vocab id %d of %q (ids must be in [0, %d))", ErrUnsupported, id, tok, maxMergeID)
		}
	}
	rawVocab, err := newVocabTable(m.Vocab)
	if err != nil {
		return nil, err
	}
	b := &bpeModel{
		byteLevel:    byteLevel,
		rawVocab:     rawVocab,
		ignoreMerges: m.IgnoreMerges,
		byteFallback: m.ByteFallback,
		unkID:        -1,
		fuseUnk:      m.FuseUnk,
		cache:        newWordCache(),
	}
	if byteLevel {
		decoded := make(map[string]int, len(m.Vocab))
		for tok, id := range m.Vocab {
			if raw, ok := byteLevelDecode(tok); ok {
				decoded[raw] = id
			}
		}
		if b.vocab, err = newVocabTable(decoded); err != nil {
			return nil, err
		}
	} else {
		b.vocab = rawVocab
	}
	b.allBytes = byteLevel
	for i := range b.byteIDs {
		b.byteIDs[i], b.fallbackIDs[i] = -1, -1
		if id, ok := b.vocab.get(string([]byte{byte(i)})); ok && byteLevel {
			b.byteIDs[i] = int32(id)
		} else {
			b.allBytes = false
		}
		if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.fallbackIDs[i] = int32(id)
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
	b.merges = newMergeTable(len(merges))
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
		if err := b.merges.add(a, c, n, rank); err != nil {
			return nil, err
		}
	}
	b.merges.numberedInOrder()
	if b.allBytes {
		b.bytePairRanks = make([]int32, 1<<16)
		for i := range b.bytePairRanks {
			b.bytePairRanks[i] = b.merges.rank(b.byteIDs[i>>8], b.byteIDs[i&0xff])
		}
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

// symbol is one node of the doubly linked list mergeHeap merges a long
// word in.
type symbol struct {
	id         int32
	prev, next int32
	dead       bool
}

// maxScanSymbols is the longest word (in initial symbols) mergeSmall
// merges; longer ones go to mergeHeap.
const maxScanSymbols = 48

type mergeItem struct {
	rank, pos int32
}

// encodeWord appends the ids of one pre-tokenized word.
func (b *bpeModel) encodeWord(ids []int, w string, st *scratch) []int {
	ids, _ = b.encodeWordHashed(ids, w, 0, false, st)
	return ids
}

// encodeWordHashed is encodeWord given, when hashed, w's word-cache hash h.
// cold reports that w went to the shared word cache or to BPE (neither the
// scratch's recent words nor, with ignore_merges, the vocabulary had it).
func (b *bpeModel) encodeWordHashed(ids []int, w string, h uint64, hashed bool, st *scratch) (out []int, cold bool) {
	if st.recent == nil {
		st.recent = new(recentWords)
	}
	k, short := shortWordOf(w)
	if !short {
		return b.encodeWordShared(ids, w, h, hashed, st)
	}
	recent := st.recent.slot(k)
	if out, ok := recent.appendGet(ids, b.cache, k); ok {
		return out, false
	}
	start := len(ids)
	ids, cold = b.encodeWordShared(ids, w, h, hashed, st)
	recent.put(b.cache, k, ids[start:])
	return ids, cold
}

// encodeWordShared is encodeWordHashed without the scratch's recent words:
// the vocabulary (ignore_merges), the shared word cache, or BPE.
func (b *bpeModel) encodeWordShared(ids []int, w string, h uint64, hashed bool, st *scratch) (out []int, cold bool) {
	if w == "" {
		return ids, false
	}
	if b.ignoreMerges {
		if id, ok := b.vocab.get(w); ok {
			return append(ids, id), false
		}
	}
	if len(w) > maxCachedWordBytes {
		return b.merge(ids, w, st), true
	}
	if !hashed {
		h = b.cache.hash(w)
	}
	return b.cache.appendGetOrMerge(ids, w, h, b, st), true
}

// initialSymbols appends to syms the ids of the word's characters (bytes
// for byte-level models), with byte fallback and unknown-token handling.
func (b *bpeModel) initialSymbols(w string, syms []int32) []int32 {
	if b.byteLevel && b.allBytes {
		for i := 0; i < len(w); i++ {
			syms = append(syms, b.byteIDs[w[i]])
		}
		return syms
	}
	// Unknown characters become unk_token, consecutive ones fused into one
	// when fuse_unk is set; none at all without an unk_token.
	unkPending := false
	known := func(id int32) {
		if unkPending {
			syms = append(syms, int32(b.unkID))
			unkPending = false
		}
		syms = append(syms, id)
	}
	unknown := func() {
		switch {
		case b.unkID < 0:
		case !unkPending:
			unkPending = true
		case !b.fuseUnk:
			syms = append(syms, int32(b.unkID))
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
			if id, ok := b.vocab.get(ch); ok {
				known(int32(id))
			} else if b.byteFallback && b.allFallback(ch) {
				known(b.fallbackIDs[ch[0]])
				for j := 1; j < len(ch); j++ {
					syms = append(syms, b.fallbackIDs[ch[j]])
				}
			} else {
				unknown()
			}
		}
	}
	if unkPending {
		syms = append(syms, int32(b.unkID))
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
	syms := b.initialSymbols(w, st.syms[:0])
	switch {
	case len(syms) > maxScanSymbols:
		syms = b.mergeHeap(syms, st)
	case b.bytePairRanks != nil:
		// A symbol a byte (allBytes), and the first pairs' ranks from the
		// byte-pair table rather than the pair cache.
		ranks := st.ranks[:0]
		for i := 1; i < len(w); i++ {
			ranks = append(ranks, b.bytePairRanks[uint16(w[i-1])<<8|uint16(w[i])])
		}
		syms = b.mergeRanked(syms, ranks, st)
	default:
		syms = b.mergeSmall(syms, st)
	}
	for _, id := range syms {
		ids = append(ids, int(id))
	}
	st.syms = syms[:0]
	return ids
}

// mergeSmall merges syms in place and returns them shortened, finding the
// best pair by scanning: faster than a heap for the short words that make
// up nearly all text. It looks up the rank of each pair of syms and hands
// them to mergeRanked.
func (b *bpeModel) mergeSmall(syms []int32, st *scratch) []int32 {
	if len(syms) < 2 {
		return syms
	}
	mt := b.merges
	ranks := st.ranks[:0]
	for i := 1; i < len(syms); i++ {
		r, ok := mt.cachedRank(syms[i-1], syms[i])
		if !ok {
			r = mt.fillRank(syms[i-1], syms[i])
		}
		ranks = append(ranks, r)
	}
	return b.mergeRanked(syms, ranks, st)
}

// mergeRanked is mergeSmall given ranks[i], the rank of the pair (syms[i],
// syms[i+1]), for every pair, in st.ranks' memory. The symbols stay in an
// array (a join shifts the tail left), and so do their pairs' ranks, so a
// join looks up only the two pairs it makes.
func (b *bpeModel) mergeRanked(syms, ranks []int32, st *scratch) []int32 {
	mt := b.merges
	st.ranks = ranks[:0]
	for {
		// The lowest rank, leftmost among equals: the least rank<<8|i
		// (below 2^30), kept without a branch: the compiler makes
		// "if k < m" a jump, which mispredicts on words' unsorted ranks.
		m := int64(noMerge)<<8 | 0xff
		for i, r := range ranks {
			d := (int64(r)<<8 | int64(i)) - m
			m += d & (d >> 63)
		}
		bestRank, best := int32(m>>8), int(m&0xff)
		if bestRank == noMerge {
			return syms
		}
		id := mt.merged(bestRank)
		// The pairs the join makes, (best-1, best) and (best, best+1) once
		// joined, looked up before the shifts, so that the loads are under
		// way while memmove runs.
		left, right := noMerge, noMerge
		if best > 0 {
			var ok bool
			if left, ok = mt.cachedRank(syms[best-1], id); !ok {
				left = mt.fillRank(syms[best-1], id)
			}
		}
		if best+2 < len(syms) {
			var ok bool
			if right, ok = mt.cachedRank(id, syms[best+2]); !ok {
				right = mt.fillRank(id, syms[best+2])
			}
		}
		syms[best] = id
		copy(syms[best+1:], syms[best+2:])
		syms = syms[:len(syms)-1]
		copy(ranks[best:], ranks[best+1:])
		ranks = ranks[:len(ranks)-1]
		if best > 0 {
			ranks[best-1] = left
		}
		if best < len(ranks) {
			ranks[best] = right
		}
	}
}

// mergeHeap merges long words as the Rust library does, with a priority
// queue of pairs over a linked list of symbols; it returns the merged ids
// in syms' memory.
func (b *bpeModel) mergeHeap(ids []int32, st *scratch) []int32 {
	syms := st.list[:0]
	for i, id := range ids {
		syms = append(syms, symbol{id: id, prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
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
		if r := b.merges.rank(syms[i].id, syms[nx].id); r != noMerge {
			push(mergeItem{r, i})
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
		// As the Rust library does, a queued merge still applies when the
		// pair now at its place merges into the same token.
		id := b.merges.merged(it.rank)
		r := b.merges.rank(s.id, syms[s.next].id)
		if r == noMerge || b.merges.merged(r) != id {
			continue
		}
		nx := s.next
		syms[it.pos].id = id
		syms[it.pos].next = syms[nx].next
		syms[nx].dead = true
		if syms[nx].next >= 0 {
			syms[syms[nx].next].prev = it.pos
		}
		if p := syms[it.pos].prev; p >= 0 {
			pairAt(p)
		}
		pairAt(it.pos)
	}
	st.heap = h[:0]
	out := ids[:0]
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	st.list = syms[:0]
	return out
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
	syms       []int32  // a word's symbols (merge)
	ranks      []int32  // their pairs' ranks (mergeSmall)
	list       []symbol // mergeHeap's linked list
	heap       []mergeItem
	recent     *recentWords // lazily allocated
	// A parallel encode's chunk ids, the caller's and its helper's
	// (encodeWordListParallel).
	chunkIDs, helperIDs []int
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

func getScratch() *scratch   { return scratchPool.Get().(*scratch) }
func putScratch(st *scratch) { scratchPool.Put(st) }
