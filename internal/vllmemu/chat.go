package vllmemu

import (
	"errors"
	"fmt"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/tokenize"
)

// LoadChatTemplates finds the model's chat template as `kvroute serve` and
// vLLM do (chattemplate.ForTokenizer): the file named by templateFile
// (--chat-template) if set, else chat_template.jinja in tokenizerDir, else
// tokenizer_config.json's "chat_template". It returns nil, nil when there is
// none: chat requests then answer 400.
func LoadChatTemplates(tok *tokenize.Tokenizer, tokenizerDir, templateFile string) (*chattemplate.ChatTemplates, error) {
	ct, err := chattemplate.ForTokenizer(tokenizerDir, templateFile, tok.Config().ChatTemplate, specialsOf(tok), nil)
	switch {
	case errors.Is(err, chattemplate.ErrNoTemplate):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return ct, nil
}

// specialsOf is tokenizer_config.json's special-token strings, as chat
// templates see them.
func specialsOf(tok *tokenize.Tokenizer) chattemplate.Specials {
	c := tok.Config()
	return chattemplate.Specials{BOS: c.BOSToken, EOS: c.EOSToken, Unk: c.UnkToken, Pad: c.PadToken}
}
