package server

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/chattemplate/modelchat"
	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/tokenize"
)

// CheckPools loads every pool's tokenizer and chat templates exactly as New
// does and returns every problem that would stop New, one per pool, each
// naming it. `kvroute validate-config` runs it, so a config it accepts is
// one serve starts with. baseDir resolves relative paths (the config file's
// directory).
func CheckPools(cfg *config.Config, baseDir string) error {
	_, err := loadAllPoolParts(cfg, baseDir, time.Now)
	return err
}

// loadAllPoolParts loads every pool's parts by name; the error joins one
// error per pool that failed.
func loadAllPoolParts(cfg *config.Config, baseDir string, now func() time.Time) (map[string]poolParts, error) {
	parts := map[string]poolParts{}
	var errs []error
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		pp, err := loadPoolParts(p, baseDir, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("pools[%d] (%s): %w", i, p.Name, err))
			continue
		}
		parts[p.Name] = pp
	}
	return parts, errors.Join(errs...)
}

// loadPoolParts loads the pool's tokenizer and chat templates once, at
// start. No tokenizer configured: zero parts (the pool routes by load). A
// tokenizer without any chat template serves /v1/completions only; chat
// requests then fail open.
func loadPoolParts(p *config.Pool, baseDir string, now func() time.Time) (poolParts, error) {
	if p.Tokenizer == "" {
		if p.ChatTemplate != "" {
			return poolParts{}, errors.New("chat_template needs a tokenizer")
		}
		return poolParts{}, nil
	}
	path := resolve(baseDir, p.Tokenizer)
	tok, err := tokenize.Load(path)
	if err != nil {
		return poolParts{}, fmt.Errorf("tokenizer: %w", err)
	}
	pp := poolParts{tokenizer: tok}

	templateFile := ""
	if p.ChatTemplate != "" {
		templateFile = resolve(baseDir, p.ChatTemplate)
	}
	ct, err := modelchat.Load(tok, path, templateFile, now)
	switch {
	case errors.Is(err, chattemplate.ErrNoTemplate):
		return pp, nil
	case err != nil:
		return poolParts{}, fmt.Errorf("chat template: %w", err)
	}
	pp.chat = chatRenderer{ct}
	return pp, nil
}

func resolve(baseDir, path string) string {
	if baseDir == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(baseDir, path)
}

// chatRenderer adapts chattemplate to the router's ChatRenderer.
type chatRenderer struct{ ct *chattemplate.ChatTemplates }

// AppendChat appends the prompt vLLM's chat endpoint renders for an OpenAI
// chat body to dst.
func (c chatRenderer) AppendChat(dst, body []byte) ([]byte, error) {
	return c.ct.AppendChat(dst, body)
}
