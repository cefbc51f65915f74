// Package chattemplate renders chat templates exactly as vLLM does before
// tokenizing a /v1/chat/completions request: a Jinja2 engine with Python
// semantics (lexer → parser → AST → tree-walking interpreter with a step
// budget), an order-preserving JSON decoder, and vLLM's message
// preprocessing (content-format detection, text-part joining, tool-call
// arguments, tools, chat_template_kwargs).
//
// Typical use, once per model and then per request:
//
//	tpls, err := chattemplate.NewChatTemplates(override, cfg.ChatTemplate, specials, nil)
//	req, err := chattemplate.ParseChatRequest(body)
//	prompt, err := tpls.RenderRequest(req) // then tokenize without special tokens
//
// Semantics follow Jinja2 3.1 in transformers' ImmutableSandboxedEnvironment
// (trim_blocks, lstrip_blocks, loopcontrols, {% generation %}); see
// docs/CHAT_TEMPLATES.md for what is covered and what is not.
package chattemplate
