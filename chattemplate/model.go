package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// ChatTemplateFile is where transformers (>= 4.43) saves a model's chat
// template, beside tokenizer_config.json; it wins over the config's
// "chat_template" field (transformers tokenization_utils_base.py).
const ChatTemplateFile = "chat_template.jinja"

// ForTokenizer loads the chat templates of the model whose tokenizer files
// live at tokenizerPath (the directory, or its tokenizer.json), in the order
// vLLM ends up with: templateFile when set (vLLM's --chat-template), else
// chat_template.jinja beside the tokenizer, else chatTemplateJSON, the
// "chat_template" of tokenizer_config.json (a string or a list of named
// templates). specials are tokenizer_config.json's token strings. A model
// without any template returns an error wrapping ErrNoTemplate. (It takes
// the config's fields, not a *tokenize.Tokenizer, so that package tokenize's
// tests may import this one.)
func ForTokenizer(tokenizerPath, templateFile string, chatTemplateJSON json.RawMessage, specials Specials, now func() time.Time) (*ChatTemplates, error) {
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
	return NewChatTemplates(override, chatTemplateJSON, specials, now)
}
