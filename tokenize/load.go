package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// tokenizerFile is the subset of tokenizer.json this package reads. Field
// names follow the tokenizers library's serde layout (tokenizers v0.22).
type tokenizerFile struct {
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	Model         modelJSON        `json:"model"`
	PostProcessor json.RawMessage  `json:"post_processor"`
}

type addedTokenJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
}

// patternJSON is a Split or Replace pattern: {"String": s} or {"Regex": r}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// componentJSON holds the fields of every supported normalizer,
// pre-tokenizer and post-processor; Type says which apply.
type componentJSON struct {
	Type string `json:"type"`
	// Sequence members under their per-kind names.
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Replace, Split.
	Pattern *patternJSON `json:"pattern"`
	Content *string      `json:"content"`
	// Prepend.
	Prepend *string `json:"prepend"`
	// Strip.
	StripLeft  bool `json:"strip_left"`
	StripRight bool `json:"strip_right"`
	// Split.
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// ByteLevel, Metaspace.
	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Metaspace.
	Replacement   *string `json:"replacement"`
	PrependScheme *string `json:"prepend_scheme"`
	Split         *bool   `json:"split"`
	// Digits.
	IndividualDigits bool `json:"individual_digits"`
	// TemplateProcessing.
	Single        []templatePieceJSON            `json:"single"`
	SpecialTokens map[string]templateSpecialJSON `json:"special_tokens"`
}

type templatePieceJSON struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type templateSpecialJSON struct {
	ID  string `json:"id"`
	IDs []int  `json:"ids"`
}

func isNull(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}

func decodeComponent(kind string, b json.RawMessage) (*componentJSON, error) {
	var c componentJSON
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	if c.Type == "" {
		return nil, fmt.Errorf("%s: missing \"type\"", kind)
	}
	return &c, nil
}

// build assembles a Tokenizer from tokenizer.json.
func build(b []byte) (*Tokenizer, error) {
	var f tokenizerFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	t := &Tokenizer{}
	var err error
	if !isNull(f.Normalizer) {
		if t.normalizer, err = buildNormalizer(f.Normalizer); err != nil {
			return nil, err
		}
	}
	byteLevel := false
	if !isNull(f.PreTokenizer) {
		if t.preTokenizer, byteLevel, err = buildPreTokenizer(f.PreTokenizer); err != nil {
			return nil, err
		}
	}
	if t.model, err = buildBPE(&f.Model, byteLevel); err != nil {
		return nil, err
	}
	if !isNull(f.PostProcessor) {
		if t.post, err = buildPostProcessor(f.PostProcessor); err != nil {
			return nil, err
		}
	}
	if t.addedRaw, t.addedNorm, err = buildAdded(f.AddedTokens, t.normalizer); err != nil {
		return nil, err
	}
	return t, nil
}

// template is a TemplateProcessing "single" reduced to the ids placed
// before and after the sequence.
type template struct {
	prefix, suffix []int
}

func buildPostProcessor(b json.RawMessage) (template, error) {
	c, err := decodeComponent("post_processor", b)
	if err != nil {
		return template{}, err
	}
	switch c.Type {
	case "ByteLevel":
		// Only offsets change (trim_offsets); ids are untouched.
		return template{}, nil
	case "Sequence":
		var out template
		for i, pb := range c.Processors {
			tp, err := buildPostProcessor(pb)
			if err != nil {
				return template{}, fmt.Errorf("post_processor Sequence[%d]: %w", i, err)
			}
			if len(tp.prefix)+len(tp.suffix) > 0 {
				if len(out.prefix)+len(out.suffix) > 0 {
					return template{}, fmt.Errorf("%w: post_processor Sequence with two TemplateProcessing", ErrUnsupported)
				}
				out = tp
			}
		}
		return out, nil
	case "TemplateProcessing":
		var out template
		seen := false
		for _, p := range c.Single {
			switch {
			case p.Sequence != nil:
				if p.Sequence.ID != "A" || seen {
					return template{}, fmt.Errorf("%w: TemplateProcessing single sequence %q", ErrUnsupported, p.Sequence.ID)
				}
				seen = true
			case p.SpecialToken != nil:
				st, ok := c.SpecialTokens[p.SpecialToken.ID]
				if !ok {
					return template{}, fmt.Errorf("TemplateProcessing: special token %q missing from special_tokens", p.SpecialToken.ID)
				}
				if seen {
					out.suffix = append(out.suffix, st.IDs...)
				} else {
					out.prefix = append(out.prefix, st.IDs...)
				}
			default:
				return template{}, fmt.Errorf("TemplateProcessing: unknown piece in single")
			}
		}
		if !seen {
			return template{}, fmt.Errorf("%w: TemplateProcessing single without $A", ErrUnsupported)
		}
		return out, nil
	}
	return template{}, fmt.Errorf("%w: post_processor type %q", ErrUnsupported, c.Type)
}

func buildAdded(tokens []addedTokenJSON, norm normalizer) (raw, normed *addedMatcher, err error) {
	var rawList, normList []addedToken
	for i, a := range tokens {
		if a.ID == nil || *a.ID < 0 {
			return nil, nil, fmt.Errorf("added_tokens[%d]: missing or negative id", i)
		}
		if *a.ID >= maxMergeID {
			// Vocabulary ids are bounded the same way (buildBPE); the segment
			// cache keeps ids as int32.
			return nil, nil, fmt.Errorf("%w: added_tokens[%d]: id %d (ids must be in [0, %d))", ErrUnsupported, i, *a.ID, maxMergeID)
		}
		if a.Content == "" {
			return nil, nil, fmt.Errorf("added_tokens[%d]: empty content", i)
		}
		tok := addedToken{id: *a.ID, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip}
		if a.Normalized {
			if norm != nil {
				tok.content = norm.normalize(tok.content)
			}
			if tok.content == "" {
				continue
			}
			normList = append(normList, tok)
		} else {
			rawList = append(rawList, tok)
		}
	}
	// Stable order so that duplicate contents resolve the same way every load.
	sort.SliceStable(rawList, func(i, j int) bool { return rawList[i].id < rawList[j].id })
	sort.SliceStable(normList, func(i, j int) bool { return normList[i].id < normList[j].id })
	return newAddedMatcher(rawList), newAddedMatcher(normList), nil
}
