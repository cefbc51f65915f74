package routing

import (
	"errors"
	"fmt"
)

// PromptTokens tokenizes an OpenAI body (path /v1/completions or
// /v1/chat/completions) exactly as a routing decision does — the pool its
// model names, that pool's tokenizer and chat template — without routing
// it. The parity checks compare the result with the engine's own
// POST /tokenize. reason is the decision's reason when the body cannot be
// tokenized (no tokenizer, an unknown model, ...).
func (r *Router) PromptTokens(path string, body []byte) (ids []int, reason string, err error) {
	req, err := ParseRequest(path, body, r.o().Limits)
	if req == nil || err != nil {
		if err == nil {
			err = errors.New("not a JSON object")
		}
		return nil, ReasonBadJSON, err
	}
	ref, ok := r.byModel[req.Model]
	if !ok {
		return nil, ReasonUnknownModel, fmt.Errorf("model name of %d bytes is not served by any pool", len(req.Model))
	}
	ids, reason, err = r.tokens(ref.pool, req, nil, nil)
	if reason != "" && err == nil {
		err = errors.New(reason)
	}
	return ids, reason, err
}
