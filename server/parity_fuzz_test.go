package server

import (
	"strings"
	"testing"
)

// FuzzParseTokenizeAnswer: any engine answer is refused or accepted without
// a panic, and an accepted one agrees with its own count.
func FuzzParseTokenizeAnswer(f *testing.F) {
	for _, s := range []string{
		`{"count":3,"max_model_len":32768,"tokens":[1,2,3]}`, `{"tokens":[]}`, `{"count":2,"tokens":[1]}`,
		`{"tokens":null}`, `[]`, `{"tokens":[1e400]}`, `{"tokens":[-1,"x"]}`, "", strings.Repeat("[", 1000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids, err := parseTokenizeAnswer(raw)
		if err != nil {
			if ids != nil {
				t.Fatal("ids with an error")
			}
			if strings.Contains(err.Error(), string(raw)) && len(raw) > 8 {
				t.Fatal("the error quotes the answer")
			}
			return
		}
		if ids == nil {
			t.Fatal("accepted without tokens")
		}
	})
}

// TestParseTokenizeAnswer: vLLM's answer shape is accepted, anything else
// refused with its length only.
func TestParseTokenizeAnswer(t *testing.T) {
	ids, err := parseTokenizeAnswer([]byte(`{"count":3,"max_model_len":32768,"tokens":[9707,11,1879]}`))
	if err != nil || len(ids) != 3 || ids[0] != 9707 {
		t.Fatalf("%v %v", ids, err)
	}
	for _, bad := range []string{`{"count":2,"tokens":[1]}`, `{"error":"x"}`, `not json`, `{"tokens":"abc"}`,
		`{"tokens":[` + strings.Repeat("1,", maxTokenizeBytes/2) + `1]}`} {
		if _, err := parseTokenizeAnswer([]byte(bad)); err == nil {
			t.Errorf("accepted %.40q", bad)
		}
	}
}
