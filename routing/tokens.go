package routing

import (
	"fmt"
	"unsafe"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
)

// appendEncoder is a Tokenizer that can append to a reused buffer
// (tokenize.Tokenizer.AppendEncode); the router pools its id buffers then.
type appendEncoder interface {
	AppendEncode(dst []int, text string, addSpecialTokens bool) []int
}

// maxPooledIDs bounds the id buffers the router keeps for reuse (8 MiB).
const maxPooledIDs = 1 << 20

// maxPooledText bounds the prompt-text buffers the router keeps for reuse.
const maxPooledText = 8 << 20

// blockKeys appends the request's block keys under the pool's key mode.
func blockKeys(ks *blockhash.KeySet, engine bool, dst []index.BlockKey, ids []int, rk blockhash.RequestKeys) ([]index.BlockKey, error) {
	var raw [512]uint64
	buf := raw[:0]
	if n := len(ids) / ks.BlockSize; n > len(raw) {
		buf = make([]uint64, 0, n)
	}
	var err error
	if engine {
		buf, err = blockhash.AppendEventKeys(ks.Engine, buf, ids, rk)
	} else {
		buf, err = blockhash.AppendKeys(ks.Tokens, buf, ks.Tokens.Root(), ids, rk)
	}
	for _, v := range buf {
		dst = append(dst, index.BlockKey(v))
	}
	return dst, err
}

// tokens returns the request's prompt token ids, or a reason to route by load.
// buf is an empty buffer the ids may be appended to.
func (r *Router) tokens(p *pool, req *Request, buf []int, rec *Recorder) ([]int, string, error) {
	var ids []int
	switch req.Kind {
	case KindCompletion:
		if req.PromptIDs != nil {
			return req.PromptIDs, "", nil
		}
		if p.Tokenizer == nil {
			return nil, ReasonNoTokenizer, nil
		}
		if req.Prompt == "" {
			return nil, ReasonEmptyPrompt, nil
		}
		ids = r.encode(p, buf, req.Prompt, req.AddSpecialTokens)
	case KindChat:
		if p.Tokenizer == nil || p.Chat == nil {
			return nil, ReasonNoTokenizer, nil
		}
		textBuf := r.texts.Get().(*[]byte)
		prompt, err := p.Chat.AppendChat((*textBuf)[:0], req.Body)
		defer func() {
			// The text is dead once tokenized: the tokenizer keeps no part of it.
			if cap(prompt) <= maxPooledText {
				*textBuf = prompt[:0]
				r.texts.Put(textBuf)
			}
		}()
		text := unsafe.String(unsafe.SliceData(prompt), len(prompt))
		rec.mark(stepTemplate)
		if err != nil {
			// Template errors can quote the messages (raise_exception, an
			// unknown content type): keep their length only.
			return nil, ReasonChatTemplate, fmt.Errorf("chat template could not render the request (%d-byte error withheld: it may quote the request)", len(err.Error()))
		}
		if r.o().Limits.promptTooLarge(len(text)) {
			return nil, ReasonPromptTooLarge, nil
		}
		ids = r.encode(p, buf, text, req.AddSpecialTokens)
	default:
		return nil, ReasonNoBody, nil
	}
	if r.o().Limits.MaxPromptTokens > 0 && len(ids) > r.o().Limits.MaxPromptTokens {
		return nil, ReasonPromptTooLarge, nil
	}
	return ids, "", nil
}

// encode tokenizes text, into buf when the tokenizer can append.
func (r *Router) encode(p *pool, buf []int, text string, addSpecialTokens bool) []int {
	if a, ok := p.Tokenizer.(appendEncoder); ok {
		return a.AppendEncode(buf, text, addSpecialTokens)
	}
	return p.Tokenizer.Encode(text, addSpecialTokens)
}
