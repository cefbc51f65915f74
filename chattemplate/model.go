package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/kvroute/kvroute/tokenize"
)

// ChatTemplateFile is where transformers (>= 4.43) saves a model's chat
// template, beside tokenizer_config.json; it wins over the config's
// "chat_template" field (transformers tokenization_utils_base.py).
const ChatTemplateFile = "chat_template.jinja"

// ForTokenizer loads the chat templates of the model whose tokenizer was
// loaded from tokenizerPath (its directory, or its tokenizer.json), in the
// order vLLM ends up with: templateFile when set (vLLM's --chat-template),
// else chat_template.jinja beside the tokenizer, else tokenizer_config.json's
// "chat_template" (a string or a list of named templates). Special-token
// strings come from tokenizer_config.json. A model without any template
// returns an error wrapping ErrNoTemplate.
func ForTokenizer(tok *tokenize.Tokenizer, tokenizerPath, templateFile string, now func() time.Time) (*ChatTemplates, error) {
	override := ""
	if templateFile == "" {
		dir := tokenizerPath
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			dir = filepath.Dir(dir)
		}
		switch _, err := os.Stat(filepath.Join(dir, ChatTemplateFile)); {
		case err == nil:
			templateFile = filepath.Join(dir, ChatTemplateFile)
		case !errors.Is(err, os.ErrNotExist):
			return nil, err
		}
	}
	if templateFile != "" {
		b, err := os.ReadFile(templateFile)
		if err != nil {
			return nil, err
		}
		override = string(b)
	}
	cfg := tok.Config()
	specials := Specials{BOS: cfg.BOSToken, EOS: cfg.EOSToken, Unk: cfg.UnkToken, Pad: cfg.PadToken}
	return NewChatTemplates(override, cfg.ChatTemplate, specials, now)
}
