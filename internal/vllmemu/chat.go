package vllmemu

import (
	"errors"
	"fmt"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/chattemplate/modelchat"
	"github.com/kvroute/kvroute/tokenize"
)

// LoadChatTemplates finds the model's chat template as `kvroute serve` and
// vLLM do (modelchat.Load): the file named by templateFile
// (--chat-template) if set, else chat_template.jinja in tokenizerDir, else
// tokenizer_config.json's "chat_template". It returns nil, nil when there is
// none: chat requests then answer 400.
func LoadChatTemplates(tok *tokenize.Tokenizer, tokenizerDir, templateFile string) (*chattemplate.ChatTemplates, error) {
	ct, err := modelchat.Load(tok, tokenizerDir, templateFile, nil)
	switch {
	case errors.Is(err, chattemplate.ErrNoTemplate):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return ct, nil
}
