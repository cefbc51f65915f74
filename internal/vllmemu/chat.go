package vllmemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/tokenize"
)

// chatTemplateFile is where transformers (≥ 4.43) writes a model's chat
// template beside tokenizer_config.json; it wins over the config's field.
const chatTemplateFile = "chat_template.jinja"

// LoadChatTemplates finds the model's chat template as `kvroute serve` and
// vLLM do: the file named by templateFile (--chat-template) if set, else
// chat_template.jinja in tokenizerDir, else tokenizer_config.json's
// "chat_template". It returns nil, nil when there is none: chat requests
// then answer 400.
func LoadChatTemplates(tok *tokenize.Tokenizer, tokenizerDir, templateFile string) (*chattemplate.ChatTemplates, error) {
	override := ""
	if templateFile != "" {
		b, err := os.ReadFile(templateFile)
		if err != nil {
			return nil, fmt.Errorf("chat template: %w", err)
		}
		override = string(b)
	} else {
		dir := tokenizerDir
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			dir = filepath.Dir(dir)
		}
		b, err := os.ReadFile(filepath.Join(dir, chatTemplateFile))
		switch {
		case err == nil:
			override = string(b)
		case !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("chat template: %w", err)
		}
	}
	tc := tok.Config()
	specials := chattemplate.Specials{BOS: tc.BOSToken, EOS: tc.EOSToken, Unk: tc.UnkToken, Pad: tc.PadToken}
	ct, err := chattemplate.NewChatTemplates(override, tc.ChatTemplate, specials, nil)
	switch {
	case errors.Is(err, chattemplate.ErrNoTemplate):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return ct, nil
}
