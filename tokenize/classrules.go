package tokenize

import (
	"fmt"
	"strings"
)

// bosEOSClasses are the transformers tokenizer classes whose fast
// tokenizer rebuilds the post-processor at load from add_bos_token and
// add_eos_token (default true and false), replacing whatever tokenizer.json
// holds: transformers 4.57 tokenization_llama_fast.py,
// tokenization_gemma_fast.py and tokenization_code_llama_fast.py,
// update_post_processor. The slow names map to the fast classes because
// AutoTokenizer (as vLLM calls it) loads the fast one.
var bosEOSClasses = map[string]bool{
	"LlamaTokenizer":         true,
	"LlamaTokenizerFast":     true,
	"CodeLlamaTokenizer":     true,
	"CodeLlamaTokenizerFast": true,
	"GemmaTokenizer":         true,
	"GemmaTokenizerFast":     true,
}

// applyClassRules rebuilds the post-processor as transformers does for the
// tokenizer class named in tokenizer_config.json.
func (t *Tokenizer) applyClassRules() error {
	class := t.config.TokenizerClass
	if !bosEOSClasses[class] {
		return nil
	}
	addBOS, addEOS := true, false
	if t.config.AddBOSToken != nil {
		addBOS = *t.config.AddBOSToken
	}
	if t.config.AddEOSToken != nil {
		addEOS = *t.config.AddEOSToken
	}
	var post template
	if addBOS {
		id, err := t.specialID("bos_token", t.config.BOSToken)
		if err != nil {
			return err
		}
		post.prefix = []int{id}
	}
	if addEOS {
		id, err := t.specialID("eos_token", t.config.EOSToken)
		if err != nil {
			return err
		}
		post.suffix = []int{id}
	}
	t.post = post
	t.classRule = strings.TrimSuffix(class, "Fast") + "Fast: add_bos_token/add_eos_token"
	return nil
}

func (t *Tokenizer) specialID(field, tok string) (int, error) {
	if tok == "" {
		return 0, fmt.Errorf("%s is required by add_%s but not set", field, field)
	}
	id, ok := t.TokenID(tok)
	if !ok {
		return 0, fmt.Errorf("%s %q is not a known token", field, tok)
	}
	return id, nil
}
