package tokenize

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// TestVocabTableAnswersAsTheMap: a vocabTable gives every id of the map it
// was built from and nothing else, for random texts (the empty one, long
// ones, shared prefixes) and for the real vocabularies in both spellings.
func TestVocabTableAnswersAsTheMap(t *testing.T) {
	check := func(name string, m map[string]int, misses []string) {
		v, err := newVocabTable(m)
		if err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, sl := range v.slots {
			if sl.id1 != 0 {
				held++
			}
		}
		if held != len(m) {
			t.Fatalf("%s: %d entries, want %d", name, held, len(m))
		}
		for tok, want := range m {
			if got, ok := v.get(tok); !ok || got != want {
				t.Fatalf("%s: get(%q) = %d, %v; want %d", name, tok, got, ok, want)
			}
		}
		for _, tok := range misses {
			if _, in := m[tok]; in {
				continue
			}
			if got, ok := v.get(tok); ok {
				t.Fatalf("%s: get(%q) = %d for a text not in the map", name, tok, got)
			}
		}
	}
	r := rand.New(rand.NewPCG(9, 10))
	m, misses := map[string]int{"": 0}, []string{"x", "ab"}
	for i := 1; i < 5000; i++ {
		b := make([]byte, r.IntN(40))
		for j := range b {
			b[j] = "abc\x00\xff"[r.IntN(5)]
		}
		if r.IntN(2) == 0 {
			m[string(b)] = i
		} else {
			misses = append(misses, string(b))
		}
	}
	check("random", m, misses)
	for _, name := range benchModels {
		data, err := os.ReadFile(filepath.Join(testdata.TokenizerDir(t, name), "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			Model struct {
				Vocab map[string]int `json:"vocab"`
			} `json:"model"`
		}
		if err := json.Unmarshal(data, &file); err != nil {
			t.Fatal(err)
		}
		if len(file.Model.Vocab) < 100000 {
			t.Fatalf("%s: %d vocabulary entries", name, len(file.Model.Vocab))
		}
		check(name, file.Model.Vocab, []string{"kvroute-not-a-token", "ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ"})
		// The loaded model's table answers the same.
		tok := loadTokenizer(t, name, false)
		for text, want := range file.Model.Vocab {
			if got, ok := tok.model.rawVocab.get(text); !ok || got != want {
				t.Fatalf("%s: the model's vocabulary gives %q = %d, %v; want %d", name, text, got, ok, want)
			}
		}
	}
}
