// Package modelchat loads a model's chat templates for its loaded
// tokenizer: chattemplate.ForTokenizer with tokenizer_config.json's template
// and special-token strings. It lives apart from both packages because
// tokenize's tests import chattemplate (so chattemplate cannot import
// tokenize), and outside internal/ because server uses it.
package modelchat

import (
	"time"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/tokenize"
)

// Load finds and parses the chat templates of the model whose tokenizer tok
// was loaded from tokenizerPath, in chattemplate.ForTokenizer's order
// (templateFile > chat_template.jinja > tokenizer_config.json). A model
// without a template returns an error wrapping chattemplate.ErrNoTemplate.
func Load(tok *tokenize.Tokenizer, tokenizerPath, templateFile string, now func() time.Time) (*chattemplate.ChatTemplates, error) {
	c := tok.Config()
	specials := chattemplate.Specials{BOS: c.BOSToken, EOS: c.EOSToken, Unk: c.UnkToken, Pad: c.PadToken}
	return chattemplate.ForTokenizer(tokenizerPath, templateFile, c.ChatTemplate, specials, now)
}
