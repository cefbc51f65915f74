package tokenize

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id                         int
	content                    string
	singleWord, lstrip, rstrip bool
}

// addedMatcher finds added tokens in text leftmost-longest, as the
// tokenizers library's AddedVocabulary does with its Aho-Corasick automaton
// (added_vocabulary.rs, v0.22): a byte trie walked from each position.
type addedMatcher struct {
	nodes []trieNode
	first [256]bool // bytes a token can start with
	// only is the one byte every token starts with, or -1: split then
	// jumps between its occurrences with strings.IndexByte (most chat
	// models' added tokens all start with '<').
	only   int
	tokens []addedToken
	ids    map[string]int
}

// trieNode is a node of the byte trie: keys[k] leads to kids[k]. Most
// nodes have one child (the rest of a token), so a scan of keys
// (strings.IndexByte) is the lookup; a map was ~7 % of a warm chat encode.
type trieNode struct {
	keys  string
	kids  []int32
	token int32 // index into tokens, -1 if no token ends here
}

// child returns the node c leads to from node n, or -1.
func (m *addedMatcher) child(n int32, c byte) int32 {
	nd := &m.nodes[n]
	if k := strings.IndexByte(nd.keys, c); k >= 0 {
		return nd.kids[k]
	}
	return -1
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{token: -1}}, ids: make(map[string]int, len(tokens)), only: -1}
	for _, t := range tokens {
		if _, dup := m.ids[t.content]; dup {
			continue // the first one wins, as in the automaton
		}
		m.ids[t.content] = t.id
		m.first[t.content[0]] = true
		n := int32(0)
		for i := 0; i < len(t.content); i++ {
			c := t.content[i]
			child := m.child(n, c)
			if child < 0 {
				child = int32(len(m.nodes))
				m.nodes[n].keys += string([]byte{c})
				m.nodes[n].kids = append(m.nodes[n].kids, child)
				m.nodes = append(m.nodes, trieNode{token: -1})
			}
			n = child
		}
		m.nodes[n].token = int32(len(m.tokens))
		m.tokens = append(m.tokens, t)
	}
	firsts := 0
	for c, ok := range m.first {
		if ok {
			firsts++
			m.only = c
		}
	}
	if firsts != 1 {
		m.only = -1
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.tokens) == 0 }

// longestAt returns the token index and end of the longest token starting
// at i, or -1.
func (m *addedMatcher) longestAt(s string, i int) (int, int) {
	tok, end := -1, -1
	n := int32(0)
	for j := i; j < len(s); j++ {
		child := m.child(n, s[j])
		if child < 0 {
			break
		}
		n = child
		if t := m.nodes[n].token; t >= 0 {
			tok, end = int(t), j+1
		}
	}
	return tok, end
}

// split calls fn for each successive part of s: an added token (id >= 0)
// or the text between tokens (id == -1), honouring single_word, lstrip and
// rstrip as tokenizers' AddedVocabulary::find_matches does.
func (m *addedMatcher) split(s string, fn func(start, end, id int)) {
	if m.empty() {
		if s != "" {
			fn(0, len(s), -1)
		}
		return
	}
	startOffset := 0 // end of the last emitted part
	for i := 0; i < len(s); {
		if m.only >= 0 {
			j := strings.IndexByte(s[i:], byte(m.only))
			if j < 0 {
				break
			}
			i += j
		} else if !m.first[s[i]] {
			i++
			continue
		}
		ti, end := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		t := &m.tokens[ti]
		start, stop := i, end
		i = end // the automaton resumes after the match, used or not
		if t.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if start < startOffset {
			continue // overlaps what an rstrip already took
		}
		if t.lstrip {
			ns := len(strings.TrimRightFunc(s[:start], unicode.IsSpace))
			start = max(ns, startOffset)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
			i = stop
		}
		if startOffset < start {
			fn(startOffset, start, -1)
		}
		fn(start, stop, t.id)
		startOffset = stop
	}
	if startOffset < len(s) {
		fn(startOffset, len(s), -1)
	}
}

// isAlphanumeric is Rust's char::is_alphanumeric (Alphabetic or Numeric).
func isAlphanumeric(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Other_Alphabetic, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isAlphanumeric(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isAlphanumeric(r)
}
