package routing

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseRequestForms(t *testing.T) {
	for _, c := range []struct {
		name, path, body string
		kind             Kind
		prompt           string
		ids              int
		special          bool
		wantErr          bool
	}{
		{"string prompt", "/v1/completions", `{"model":"m","prompt":"hi there"}`, KindCompletion, "hi there", 0, true, false},
		{"token ids", "/v1/completions", `{"model":"m","prompt":[1,2,3]}`, KindCompletion, "", 3, true, false},
		{"batch of strings", "/v1/completions", `{"model":"m","prompt":["first","second"]}`, KindCompletion, "first", 0, true, false},
		{"batch of id lists", "/v1/completions", `{"model":"m","prompt":[[5,6],[7]]}`, KindCompletion, "", 2, true, false},
		{"no special tokens", "/v1/completions", `{"model":"m","prompt":"x","add_special_tokens":false}`, KindCompletion, "x", 0, false, false},
		{"chat", "/v1/chat/completions?x=1", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, KindChat, "", 0, false, false},
		{"chat by shape", "/other", `{"model":"m","messages":[]}`, KindChat, "", 0, false, false},
		{"chat without messages", "/v1/chat/completions", `{"model":"m"}`, KindChat, "", 0, false, true},
		{"negative id", "/v1/completions", `{"model":"m","prompt":[1,-2]}`, KindCompletion, "", 0, true, true},
		{"prompt number", "/v1/completions", `{"model":"m","prompt":5}`, KindCompletion, "", 0, true, true},
		{"not json", "/v1/completions", `{"model":`, KindOther, "", 0, false, true},
		{"no prompt", "/v1/embeddings", `{"model":"m","input":"x"}`, KindOther, "", 0, false, false},
	} {
		r, err := ParseRequest(c.path, []byte(c.body), Limits{})
		if (err != nil) != c.wantErr {
			t.Errorf("%s: err %v, want error %v", c.name, err, c.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if r.Kind != c.kind || r.Prompt != c.prompt || len(r.PromptIDs) != c.ids || r.AddSpecialTokens != c.special {
			t.Errorf("%s: got kind %d prompt %q ids %v special %v", c.name, r.Kind, r.Prompt, r.PromptIDs, r.AddSpecialTokens)
		}
	}
}

func TestParseErrorsDoNotQuoteTheBody(t *testing.T) {
	for _, body := range []string{`{"prompt": secret-words}`, `{"prompt": {"secret-words": 1}}`, `{"prompt":["secret-words", 1], "model": 5}`} {
		_, err := ParseRequest("/v1/completions", []byte(body), Limits{})
		if err == nil || strings.Contains(err.Error(), "secret-words") {
			t.Errorf("%s: error %v", body, err)
		}
	}
}

// FuzzParseRequest feeds arbitrary bodies to the parser: no panic, and an
// error never quotes the input.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi"}`, `{"model":"m","prompt":[1,2,3]}`, `{"model":"m","prompt":[[1],[2]]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"cache_salt":"s"}`, `{`, `[]`, `null`, `{"prompt":[[]]}`,
		`{"model":"m","messages":[{},{},{}]}`, `{"model":"m","prompt":[1,2,3,4,5]}`, `{"prompt":[4294967296]}`,
	} {
		f.Add("/v1/completions", []byte(s))
		f.Add("/v1/chat/completions", []byte(s))
	}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		for _, lim := range []Limits{{}, {MaxPromptBytes: 24, MaxPromptTokens: 3, MaxMessages: 2}} {
			r, err := ParseRequest(path, body, lim)
			if err == nil && r == nil {
				t.Fatal("nil request without error")
			}
			if err != nil && len(body) >= 8 && strings.Contains(err.Error(), string(body)) {
				t.Fatalf("error quotes the body: %v", err)
			}
			if err == nil && lim.MaxPromptTokens > 0 && len(r.PromptIDs) > lim.MaxPromptTokens {
				t.Fatalf("%d token ids passed a limit of %d", len(r.PromptIDs), lim.MaxPromptTokens)
			}
		}
	})
}

// FuzzScanObject checks the top-level scanner against encoding/json: on input
// json accepts as an object, the scanner must accept it and see the same keys.
func FuzzScanObject(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,{"c":"]"}],"d":"x\"y"}`, `{}`, ` { "k" : null } `, `{"a":"\u00e9"}`, `{"a":1}x`, `{"a"}`, `[1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var keys []string
		err := scanObject(b, func(k, v []byte) error {
			keys = append(keys, string(k))
			if !json.Valid(v) {
				return errSyntax(0) // a malformed skipped value: an error, not a panic
			}
			return nil
		})
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil || m == nil {
			return
		}
		if err != nil {
			t.Fatalf("scanner rejected a valid object %q: %v", b, err)
		}
		for _, k := range keys {
			if !utf8.ValidString(k) || strings.Contains(k, "\\") {
				continue // json repairs invalid UTF-8 and unescapes; the router's keys are plain ASCII
			}
			if _, ok := m[k]; !ok {
				t.Fatalf("scanner saw key %q that json did not", k)
			}
		}
		if len(keys) < len(m) {
			t.Fatalf("scanner saw %d keys, json %d", len(keys), len(m))
		}
	})
}

// FuzzDecodeStringMatchesEncodingJSON: the reflection-free string decode of
// a model name gives encoding/json's value and error, whatever the bytes.
func FuzzDecodeStringMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`"qwen3"`, `"a\"b"`, `"é"`, `null`, `1`, `"`, `""`, "\"\x01\"", `"a\u0041"`, `"x" `, `"\x7f"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		got, want := "unchanged", "unchanged"
		gotErr, wantErr := decodeString(value, &got), json.Unmarshal(value, &want)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: %q, %v; encoding/json %q, %v", value, got, gotErr, want, wantErr)
		}
	})
}

// TestParseRequestAllocatesTheRequestAndTheModel: a chat body's scan costs
// two allocations, the Request (with the fields the scan fills, one
// allocation) and the model name's copy; cache_salt null costs none, and a
// salt reads as json.loads reads it. The race detector's
// instrumentation is not an allocation, so this holds under -race too.
func TestParseRequestAllocatesTheRequestAndTheModel(t *testing.T) {
	body := []byte(`{"model":"qwen3","messages":[{"role":"system","content":"` + strings.Repeat("be brief. ", 200) +
		`"},{"role":"user","content":"hi"}],"cache_salt":null,"stream":false}`)
	var r *Request
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		if r, err = ParseRequest("/v1/chat/completions", body, Limits{MaxMessages: 10}); err != nil {
			t.Fatal(err)
		}
	})
	if r.Model != "qwen3" || r.Kind != KindChat || string(r.Body) != string(body) {
		t.Fatalf("parsed %+v", r)
	}
	if allocs > 2 {
		t.Errorf("%.1f allocations a parse, want 2", allocs)
	}
	for salt, want := range map[string]string{
		`"tenant-a"`: "tenant-a", `"t\u00e9"`: "té", `null`: "", `"a","cache_salt":null`: "", `null,"cache_salt":"b"`: "b",
	} {
		r, err := ParseRequest("/v1/chat/completions", []byte(`{"model":"m","messages":[],"cache_salt":`+salt+`}`), Limits{})
		if err != nil || r.CacheSalt != want {
			t.Errorf("cache_salt %s: %q, %v; want %q", salt, r.CacheSalt, err, want)
		}
	}
	if _, err := ParseRequest("/v1/chat/completions", []byte(`{"model":"m","messages":[],"cache_salt":5}`), Limits{}); err == nil {
		t.Error("a numeric cache_salt is accepted")
	}
	// vLLM rejects an empty salt (a null one is absent); the Request still
	// names the model, so the router can answer by its pool.
	for _, salt := range []string{`""`, `"a","cache_salt":""`, `null,"cache_salt":""`} {
		r, err := ParseRequest("/v1/chat/completions", []byte(`{"model":"m","messages":[],"cache_salt":`+salt+`}`), Limits{})
		if !errors.Is(err, errUnsupported) || r == nil || r.Model != "m" {
			t.Errorf("cache_salt %s: %+v, %v; want the model and errUnsupported", salt, r, err)
		}
	}
	if _, err := ParseRequest("/v1/chat/completions", []byte(`{"model":"m","messages":[],"cache_salt":"","cache_salt":null}`), Limits{}); err != nil {
		t.Errorf("an empty salt cleared by a later null: %v", err)
	}
}

// TestDecideBudgetIsReleased: every decision gives back the body bytes it
// took from the in-flight budget, whichever way it ended, and a body that
// does not fit routes by load untokenized.
func TestDecideBudgetIsReleased(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	o := h.router.Options()
	o.MaxBytesInFlight = 2500
	h.router.SetOptions(o)
	for _, body := range []string{
		`{"model":"qwen3","prompt":"` + sharedPrefix + `"}`,
		`{"model":"qwen3","prompt":"` + sharedPrefix + `","pad":"` + strings.Repeat(" ", 2500) + `"}`,
		`{"model":"qwen3","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"qwen3","prompt":[1,2,"x"]}`,
	} {
		h.route([]byte(body))
		if n := h.router.bytesInFlight.Load(); n != 0 {
			t.Fatalf("%d bytes still counted in flight after a %d-byte decision ended", n, len(body))
		}
	}
	if d := h.router.Decide("/v1/completions", []byte(`{"model":"qwen3","prompt":"x","pad":"`+strings.Repeat(" ", 2500)+`"}`), nil); d.Reason != ReasonDecideBudget {
		t.Fatalf("a body over the budget: reason %s, want %s", d.Reason, ReasonDecideBudget)
	}
}
