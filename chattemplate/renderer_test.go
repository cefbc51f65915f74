package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

var conformanceSpecials = Specials{BOS: "<s>", EOS: "</s>", Unk: "<unk>", Pad: "<pad>"}

// openAIVisionTemplates are the templates of templates.json that vLLM's
// _detect_content_format logic (chat_utils.py, re-run in Python over Jinja2
// 3.1.6's AST) classifies as "openai"; every other one is "string".
var openAIVisionTemplates = []string{
	"lenml/gemma3", "library/cogito:14b", "library/cogito:3b", "library/gemma3:1b",
	"library/gemma3:270m", "library/granite4:350m", "library/granite4:latest",
	"library/llama-guard3:1b", "library/llama3.2-vision:90b", "library/llama3.2-vision:latest",
	"library/llama4:latest", "library/qwen2.5vl:latest",
}

func TestContentFormatDetectionMatchesVLLM(t *testing.T) {
	templates, _, _ := loadConformance(t)
	openai := map[string]bool{}
	for _, n := range openAIVisionTemplates {
		openai[n] = true
	}
	for name, src := range templates {
		r, err := NewRenderer(src, conformanceSpecials, frozenNow)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := ContentFormatString
		if openai[name] {
			want = ContentFormatOpenAI
		}
		if got := r.ContentFormat(); got != want {
			t.Errorf("%s: content format %s, vLLM detects %s", name, got, want)
		}
	}
}

// requestBody turns a conversation of conversations.json into an OpenAI
// request body as a client sends it: tool-call arguments as a JSON string.
func requestBody(t testing.TB, conv *Dict, extra map[string]any) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	msgs, _ := conv.Get("messages")
	for i, m := range msgs.(*List).Items {
		if i > 0 {
			b.WriteByte(',')
		}
		md := m.(*Dict)
		if tc, ok := md.Get("tool_calls"); ok {
			md = md.Copy()
			calls := &List{}
			for _, c := range tc.(*List).Items {
				cd := c.(*Dict).Copy()
				fv, _ := cd.Get("function")
				fd := fv.(*Dict).Copy()
				args, _ := fd.Get("arguments")
				s, err := encodeJSON(args, defaultJSONOptions(false, ""))
				if err != nil {
					t.Fatal(err)
				}
				fd.Set("arguments", s)
				cd.Set("function", fd)
				calls.Items = append(calls.Items, cd)
			}
			md.Set("tool_calls", calls)
		}
		s, err := encodeJSON(md, defaultJSONOptions(false, ""))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(s)
	}
	b.WriteByte(']')
	if tools, ok := conv.Get("tools"); ok {
		s, err := encodeJSON(tools, defaultJSONOptions(false, ""))
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(`,"tools":` + s)
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := json.Marshal(extra[k])
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(`,"` + k + `":` + string(v))
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// TestRenderRequestMatchesJinja2ForStringTemplates sends every conversation
// through the whole vLLM path (request JSON with string tool arguments,
// message rebuilding, argument parsing, tools model_dump) and expects
// Jinja2's render of the plain conversation, for every template whose
// content format is "string" (for "openai" templates vLLM changes what the
// template sees, so Jinja2's plain render is not the reference).
func TestRenderRequestMatchesJinja2ForStringTemplates(t *testing.T) {
	templates, convs, renders := loadConformance(t)
	checked := 0
	for name, src := range templates {
		r, err := NewRenderer(src, conformanceSpecials, frozenNow)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.ContentFormat() != ContentFormatString {
			continue
		}
		for _, ck := range convs.Keys() {
			conv, _ := convs.Get(ck)
			req, err := ParseChatRequest(requestBody(t, conv.(*Dict), nil))
			if err != nil {
				t.Fatal(err)
			}
			want := renders[name+"|"+ck.(string)]
			got, err := r.RenderRequest(req)
			checked++
			switch {
			case want.Err != nil:
				if err == nil {
					t.Errorf("%s|%s: rendered, Jinja2 raised %s", name, ck, *want.Err)
				}
			case err != nil:
				t.Errorf("%s|%s: %v", name, ck, err)
			case got != *want.Out:
				t.Errorf("%s|%s: %s", name, ck, firstDiff(got, *want.Out))
			}
		}
	}
	if checked < 200 {
		t.Errorf("only %d renders checked", checked)
	}
}

func mustRenderer(t *testing.T, name string) *Renderer {
	t.Helper()
	templates, _, _ := loadConformance(t)
	r, err := NewRenderer(templates[name], conformanceSpecials, frozenNow)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func renderBody(t *testing.T, r *Renderer, body string) (string, error) {
	t.Helper()
	req, err := ParseChatRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return r.RenderRequest(req)
}

func TestTextPartsAreJoinedWithNewlineForStringTemplates(t *testing.T) {
	r := mustRenderer(t, "lenml/qwen3")
	parts, err := renderBody(t, r, `{"messages":[{"role":"user","content":[{"type":"text","text":"first"},"second",{"type":"text","text":"third"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	joined, err := renderBody(t, r, `{"messages":[{"role":"user","content":"first\nsecond\nthird"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if parts != joined {
		t.Errorf("parts render %q, joined string renders %q", parts, joined)
	}
}

func TestOpenAITemplatesSeeContentParts(t *testing.T) {
	r := mustRenderer(t, "lenml/gemma3")
	got, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	// gemma3 prints string content with `| trim` and text parts one by one:
	// both spellings of the same message must render alike.
	parts, err := renderBody(t, r, `{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if got != parts || !strings.Contains(got, "Hi") {
		t.Errorf("string content %q, parts %q", got, parts)
	}
}

func TestMultimodalPartsFail(t *testing.T) {
	for _, name := range []string{"lenml/qwen3", "lenml/gemma3"} {
		r := mustRenderer(t, name)
		_, err := renderBody(t, r, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/y.png"}},{"type":"text","text":"what is this?"}]}]}`)
		if !errors.Is(err, ErrMultimodal) {
			t.Errorf("%s: err %v, want ErrMultimodal", name, err)
		}
	}
}

func TestChatTemplateKwargsReachTheTemplate(t *testing.T) {
	r := mustRenderer(t, "lenml/qwen3")
	plain, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	noThink, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	if err != nil {
		t.Fatal(err)
	}
	if noThink != plain+"<think>\n\n</think>\n\n" {
		t.Errorf("enable_thinking=false: %q (plain %q)", noThink, plain)
	}
	if _, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"tokenize":true}}`); err == nil {
		t.Error("chat_template_kwargs.tokenize accepted; vLLM rejects it")
	}
}

func TestAddGenerationPromptAndContinueFinalMessage(t *testing.T) {
	r := mustRenderer(t, "lenml/qwen3")
	with, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	without, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":false}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(with, without) || with == without {
		t.Errorf("generation prompt: with %q, without %q", with, without)
	}
	cont, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"The answer is  "}],"add_generation_prompt":false,"continue_final_message":true}`)
	if err != nil {
		t.Fatal(err)
	}
	full, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"The answer is  "}],"add_generation_prompt":false}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(cont, "The answer is  ") || !strings.HasPrefix(full, cont) || cont == full {
		t.Errorf("continue_final_message: %q (full %q)", cont, full)
	}
	if _, err := ParseChatRequest([]byte(`{"messages":[],"continue_final_message":true}`)); err == nil {
		t.Error("continue_final_message with the default add_generation_prompt=true accepted; vLLM rejects it")
	}
}

func TestToolCallArgumentsBecomeDicts(t *testing.T) {
	r := mustRenderer(t, "lenml/qwen3")
	asString, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"b\": 1, \"a\": [true, null]}"}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	asDict, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"b": 1, "a": [true, null]}}}]}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if asString != asDict || !strings.Contains(asDict, `"arguments": {"b": 1, "a": [true, null]}`) {
		t.Errorf("string arguments %q, dict arguments %q", asString, asDict)
	}
	bad, err := renderBody(t, r, `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"not json"}}]}]}`)
	if err != nil || !strings.Contains(bad, `"arguments": {}`) {
		t.Errorf("invalid JSON arguments: %q, %v (vLLM substitutes {})", bad, err)
	}
}

func TestSelectTemplate(t *testing.T) {
	list := json.RawMessage(`[{"name":"default","template":"D"},{"name":"tool_use","template":"T"}]`)
	cases := []struct {
		override string
		raw      json.RawMessage
		tools    bool
		want     string
		wantErr  bool
	}{
		{"O", json.RawMessage(`"S"`), false, "O", false},
		{"", json.RawMessage(`"S"`), true, "S", false},
		{"", list, false, "D", false},
		{"", list, true, "T", false},
		{"", json.RawMessage(`[{"name":"default","template":"D"}]`), true, "D", false},
		{"", json.RawMessage(`[{"name":"rag","template":"R"}]`), false, "", true},
		{"", nil, false, "", true},
		{"", json.RawMessage(`null`), false, "", true},
		{"", json.RawMessage(`42`), false, "", true},
	}
	for i, c := range cases {
		got, err := SelectTemplate(c.override, c.raw, c.tools)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("case %d: got %q, %v; want %q (error %v)", i, got, err, c.want, c.wantErr)
		}
	}
	if _, err := SelectTemplate("", nil, false); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("missing template: %v, want ErrNoTemplate", err)
	}
}

func TestParseChatRequestKeepsKeyOrderAndFields(t *testing.T) {
	req, err := ParseChatRequest([]byte(`{"model":"qwen","cache_salt":"s1","messages":[{"role":"user","content":"x"}],
		"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"z":{},"a":{}}}}}],
		"chat_template_kwargs":{"enable_thinking":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "qwen" || req.CacheSalt != "s1" || !req.AddGenerationPrompt || req.ContinueFinalMessage || req.Tools == nil {
		t.Errorf("request %+v", req)
	}
	got, err := encodeJSON(toolDicts(req.Tools), defaultJSONOptions(false, ""))
	if err != nil {
		t.Fatal(err)
	}
	// vLLM passes tool.model_dump(): declared fields in order, None for missing.
	want := `[{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}]`
	if got != want {
		t.Errorf("tools as the template sees them:\n got %s\nwant %s", got, want)
	}
	for _, bad := range []string{`[]`, `{"messages":{}}`, `{"messages":[{"content":"x"}]}`, `{"messages":[],"tools":{}}`, `{"messages":[]`} {
		if _, err := ParseChatRequest([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// specialsFromConfig reads bos/eos/unk/pad from tokenizer_config.json,
// where each is a string or an AddedToken object with "content".
func specialsFromConfig(t *testing.T, cfg map[string]json.RawMessage) Specials {
	get := func(k string) string {
		raw, ok := cfg[k]
		if !ok {
			return ""
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		var obj struct {
			Content string `json:"content"`
		}
		if json.Unmarshal(raw, &obj) == nil {
			return obj.Content
		}
		return ""
	}
	return Specials{BOS: get("bos_token"), EOS: get("eos_token"), Unk: get("unk_token"), Pad: get("pad_token")}
}

// TestChatGoldenTextEndToEnd renders chat_golden.json's conversations with
// each model's real tokenizer_config.json (template and special tokens)
// through the vLLM request path and compares the prompt text.
func TestChatGoldenTextEndToEnd(t *testing.T) {
	golden := testdata.ChatGoldens(t)
	convs := loadConversations(t)
	models := map[string]*ChatTemplates{}
	for _, g := range golden {
		t.Run(g.Model+"/"+g.Conv, func(t *testing.T) {
			c, ok := models[g.Model]
			if !ok {
				raw, err := os.ReadFile(filepath.Join(testdata.TokenizerDir(t, g.Model), "tokenizer_config.json"))
				if err != nil {
					t.Fatal(err)
				}
				var cfg map[string]json.RawMessage
				if err := json.Unmarshal(raw, &cfg); err != nil {
					t.Fatal(err)
				}
				if c, err = NewChatTemplates("", cfg["chat_template"], specialsFromConfig(t, cfg), frozenNow); err != nil {
					t.Fatal(err)
				}
				models[g.Model] = c
			}
			conv, _ := convs.Get(g.Conv)
			req, err := ParseChatRequest(requestBody(t, conv.(*Dict), nil))
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.RenderRequest(req)
			switch {
			case g.Err != nil:
				if err == nil || !strings.Contains(err.Error(), *g.Err) {
					t.Errorf("got %q, %v; want error %q", got, err, *g.Err)
				}
			case err != nil:
				t.Fatal(err)
			case got != *g.Text:
				t.Errorf("%s", firstDiff(got, *g.Text))
			}
		})
	}
}

func TestChatTemplatesPickToolUseForRequestsWithTools(t *testing.T) {
	cfg := json.RawMessage(`[{"name":"default","template":"D{{ messages | length }}"},{"name":"tool_use","template":"T{{ tools | length }}"}]`)
	c, err := NewChatTemplates("", cfg, Specials{}, frozenNow)
	if err != nil {
		t.Fatal(err)
	}
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"}]}`:                                             "D1",
		`{"messages":[{"role":"user","content":"x"}],"tools":[]}`:                                  "T0",
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]}`: "T1",
	} {
		req, err := ParseChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.RenderRequest(req); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", body, got, err, want)
		}
	}
	if _, err := NewChatTemplates("", json.RawMessage(`"{% if %}"`), Specials{}, nil); err == nil {
		t.Error("broken template accepted")
	}
}

// TestAppendRequestRendersWhatRenderRequestRenders: AppendRequest into one
// reused buffer that starts with other bytes leaves them alone and appends
// exactly RenderRequest's prompt (or fails with its error), for every
// template and conversation in testdata, with and without
// continue_final_message (which cuts the rendered text).
func TestAppendRequestRendersWhatRenderRequestRenders(t *testing.T) {
	templates, convs, _ := loadConformance(t)
	var ac appendCheck
	for name, src := range templates {
		r := conformanceRenderer(t, name, src)
		for _, ck := range convs.Keys() {
			conv, _ := convs.Get(ck)
			for _, extra := range []map[string]any{nil, {"add_generation_prompt": false, "continue_final_message": true}} {
				body := requestBody(t, conv.(*Dict), extra)
				parse := func() *Request {
					req, err := ParseChatRequest(body)
					if err != nil {
						t.Fatal(err)
					}
					return req
				}
				want, wantErr := r.RenderRequest(parse())
				got, gotErr := r.AppendRequest(ac.dst(), parse())
				ac.check(t, fmt.Sprintf("%s|%s %v: AppendRequest", name, ck, extra), got, want, gotErr, wantErr)
			}
		}
	}
	ac.enough(t)
}

// conformanceRenderer is the Renderer of testdata template name.
func conformanceRenderer(t *testing.T, name, src string) *Renderer {
	t.Helper()
	r, err := NewRenderer(src, conformanceSpecials, frozenNow)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return r
}

// appendPrefix is what every append of an appendCheck lands after.
const appendPrefix = "bytes before the prompt|"

// appendCheck checks appends made one after another into one reused
// buffer that starts with other bytes (appendPrefix), and counts them.
type appendCheck struct {
	buf               []byte
	checked, rendered int
}

// dst is the buffer to append the next prompt to.
func (a *appendCheck) dst() []byte {
	if a.buf == nil {
		a.buf = []byte(appendPrefix)
	}
	return a.buf[:len(appendPrefix)]
}

// check checks one append into dst() that returned buf: failed with
// wantErr's error, or left the prefix alone and appended want.
func (a *appendCheck) check(t *testing.T, label string, buf []byte, want string, gotErr, wantErr error) {
	t.Helper()
	a.checked++
	a.buf = buf // reused next, as a caller reuses what it was given back
	switch {
	case wantErr != nil || gotErr != nil:
		if wantErr == nil || gotErr == nil || wantErr.Error() != gotErr.Error() {
			t.Errorf("%s error %v, want %v", label, gotErr, wantErr)
		}
	case string(buf[:len(appendPrefix)]) != appendPrefix:
		t.Errorf("%s: the bytes before the prompt changed: %q", label, buf[:len(appendPrefix)])
	case string(buf[len(appendPrefix):]) != want:
		t.Errorf("%s: %s", label, firstDiff(string(buf[len(appendPrefix):]), want))
	default:
		a.rendered++
	}
}

// enough fails the test when testdata gave too few appends to check.
func (a *appendCheck) enough(t *testing.T) {
	t.Helper()
	if a.checked < 400 || a.rendered < 200 {
		t.Errorf("only %d appends checked, %d rendered: testdata too small", a.checked, a.rendered)
	}
}

// TestAppendChatRendersWhatParseAndAppendRequestRender: AppendChat, whose
// strings point into the body or a reused arena, appends exactly what
// ParseChatRequest then AppendRequest append (or fails with their error),
// for every template and conversation in testdata and for bodies with
// escapes, non-ASCII and invalid UTF-8, one after another into one buffer.
func TestAppendChatRendersWhatParseAndAppendRequestRender(t *testing.T) {
	templates, convs, _ := loadConformance(t)
	var bodies [][]byte
	for _, ck := range convs.Keys() {
		conv, _ := convs.Get(ck)
		bodies = append(bodies, requestBody(t, conv.(*Dict), nil), requestBody(t, conv.(*Dict), map[string]any{"add_generation_prompt": false, "continue_final_message": true}))
	}
	for _, s := range []string{
		`{"messages":[{"role":"system","content":"Be \"brief\".\n\tOK \u00e9 \ud83d\ude00 \\ end"},{"role":"user","content":"plain text"}]}`,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"bad \xff utf-8 \xe2\x82 here\"}]}",
		`{"messages":[{"role":"user","content":""},{"role":"assistant","content":"<think>\nx\n</think>\n\ny"},{"role":"user","content":"\n"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f\u0041","parameters":{"a":"\n"}}}]}`,
		`{"messages":[{"role":1,"content":"x"}]}`,
		`{"messages":[{"role":"user","content":"unterminated`,
		`{"messages":"not a list"}`,
	} {
		bodies = append(bodies, []byte(s))
	}
	var ac appendCheck
	for name, src := range templates {
		r := conformanceRenderer(t, name, src)
		c := &ChatTemplates{plain: r, tools: r}
		for i, body := range bodies {
			var want []byte
			req, wantErr := ParseChatRequest(body)
			if wantErr == nil {
				want, wantErr = c.AppendRequest(nil, req)
			}
			got, gotErr := c.AppendChat(ac.dst(), body)
			ac.check(t, fmt.Sprintf("%s body %d: AppendChat", name, i), got, string(want), gotErr, wantErr)
		}
	}
	ac.enough(t)
}

// TestAppendChatConcurrentRendersKeepTheirOwnValues: renders running at
// once, each borrowing its own body (strings in place or in a pooled arena,
// small dicts carved from its decoder's chunks, messages passed on as sent)
// and sharing one parsed template (attributes, filters and keyword names
// resolved at parse), each append exactly their own prompt.
func TestAppendChatConcurrentRendersKeepTheirOwnValues(t *testing.T) {
	templates := testdata.ChatTemplates(t)
	c, err := NewChatTemplates(templates["lenml/qwen3"], nil, conformanceSpecials, frozenNow)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 200
	bodies := make([][]byte, workers)
	wants := make([]string, workers)
	for w := range workers {
		// Escapes send strings to the arena; a namespace and keyword
		// arguments come from chat_template_kwargs.
		bodies[w] = fmt.Appendf(nil, `{"model":"m","messages":[{"role":"system","content":"sys \"%d\"\n"},{"role":"user","content":"q%d \u00e9"},{"role":"assistant","content":"<think>\nr%d\n</think>\n\na%d"},{"role":"user","content":"%s"}],"chat_template_kwargs":{"enable_thinking":%v}}`,
			w, w, w, w, strings.Repeat(fmt.Sprintf("w%d\\t", w), 50*w), w%2 == 0)
		req, err := ParseChatRequest(bodies[w])
		if err != nil {
			t.Fatal(err)
		}
		if wants[w], err = c.RenderRequest(req); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			var dst []byte
			for i := range rounds {
				var err error
				if dst, err = c.AppendChat(dst[:0], bodies[w]); err == nil && string(dst) != wants[w] {
					err = fmt.Errorf("worker %d round %d: %s", w, i, firstDiff(string(dst), wants[w]))
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
