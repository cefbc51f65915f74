package routebench

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestGenerateIsDeterministicPerSeed(t *testing.T) {
	for _, kind := range Kinds {
		p := WorkloadParams{Kind: kind, Groups: 3, UsersPerGroup: 4, PrefixWords: 30, QuestionWords: 5, Rate: 10, Requests: 25, MaxTokens: 4, Seed: 7,
			ZipfS: 1, Tenants: 2, Adapters: 2}
		a, err := Generate(p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Generate(p)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: same seed, different workload", kind)
		}
		p.Seed = 8
		c, _ := Generate(p)
		if reflect.DeepEqual(a, c) {
			t.Fatalf("%s: seeds 7 and 8 give the same workload", kind)
		}
		if len(a) != 25 {
			t.Fatalf("%s: %d requests, want 25", kind, len(a))
		}
		for i, r := range a {
			if r.MaxTokens != 4 || (i > 0 && r.At < a[i-1].At) {
				t.Fatalf("%s: request %d: max_tokens %d, at %v after %v", kind, i, r.MaxTokens, r.At, a[max(i-1, 0)].At)
			}
		}
	}
}

func TestSharedPrefixRequestsShareTheirGroupsDocument(t *testing.T) {
	reqs, err := Generate(WorkloadParams{Kind: SharedPrefix, Groups: 3, UsersPerGroup: 2, PrefixWords: 50, QuestionWords: 5, Rate: 10, Requests: 60, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	docs := map[int]string{}
	for _, r := range reqs {
		doc, question, ok := strings.Cut(r.Prompt, "\n")
		if !ok || len(strings.Fields(doc)) != 52 || len(strings.Fields(question)) != 3+5 {
			t.Fatalf("malformed prompt %q", r.Prompt)
		}
		if prev, seen := docs[r.Session]; seen && prev != doc {
			t.Fatalf("group %d has two documents", r.Session)
		}
		docs[r.Session] = doc
	}
	if len(docs) != 3 || docs[0] == docs[1] || docs[1] == docs[2] {
		t.Fatalf("want 3 distinct documents, got %d", len(docs))
	}
}

func TestMultiTurnPromptsGrowFromTheirHistory(t *testing.T) {
	reqs, err := Generate(WorkloadParams{Kind: MultiTurn, Groups: 2, PrefixWords: 5, QuestionWords: 3, Rate: 1, Requests: 12, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	last := map[int]string{}
	for _, r := range reqs {
		if prev, ok := last[r.Session]; ok && (!strings.HasPrefix(r.Prompt, prev) || len(r.Prompt) <= len(prev)) {
			t.Fatalf("session %d turn does not extend its history", r.Session)
		}
		last[r.Session] = r.Prompt
	}
	if len(last) != 2 {
		t.Fatalf("%d sessions, want 2", len(last))
	}
}

func TestNoSharingPromptsDifferFromTheFirstWord(t *testing.T) {
	reqs, _ := Generate(WorkloadParams{Kind: NoSharing, PrefixWords: 20, QuestionWords: 2, Rate: 5, Requests: 30, Seed: 1})
	seen := map[string]bool{}
	for _, r := range reqs {
		first := strings.Fields(r.Prompt)[0] + " " + strings.Fields(r.Prompt)[1]
		if seen[first] || len(strings.Fields(r.Prompt)) != 2+22 {
			t.Fatalf("prompt %q shares its start or has the wrong length", r.Prompt)
		}
		seen[first] = true
	}
}

func TestArrivalsArePoissonAtTheRate(t *testing.T) {
	reqs, _ := Generate(WorkloadParams{Kind: NoSharing, PrefixWords: 1, Rate: 20, Requests: 4000, Seed: 9})
	mean := reqs[len(reqs)-1].At / time.Duration(len(reqs))
	// 4000 exponential gaps of mean 50ms: the sample mean is within ±5 % with
	// overwhelming probability; the seed is fixed, so this cannot flake.
	if mean < 47500*time.Microsecond || mean > 52500*time.Microsecond {
		t.Fatalf("mean inter-arrival %v, want ≈ 50ms", mean)
	}
	// Exponential gaps: about e^-1 ≈ 36.8 % exceed the mean.
	over := 0
	for i := 1; i < len(reqs); i++ {
		if reqs[i].At-reqs[i-1].At > 50*time.Millisecond {
			over++
		}
	}
	if f := float64(over) / float64(len(reqs)-1); f < 0.33 || f > 0.41 {
		t.Fatalf("%.3f of gaps exceed the mean, want ≈ 0.368 (exponential)", f)
	}
}

func TestGenerateRejectsBadParams(t *testing.T) {
	for _, p := range []WorkloadParams{
		{Kind: "nope", Rate: 1, Requests: 1},
		{Kind: SharedPrefix, Rate: 0, Requests: 1, Groups: 1, UsersPerGroup: 1},
		{Kind: SharedPrefix, Rate: 1, Requests: 1},
		{Kind: MultiTurn, Rate: 1, Requests: 1},
		{Kind: Chat, Rate: 1, Requests: 1},
		{Kind: Eviction, Rate: 1, Requests: 1, ZipfS: 1},
		{Kind: Eviction, Rate: 1, Requests: 1, Groups: 2, ZipfS: -1},
		{Kind: Tenants, Rate: 1, Requests: 1, Groups: 2},
		{Kind: Tenants, Rate: 1, Requests: 1, Groups: 2, Tenants: -1, Adapters: 2},
	} {
		if _, err := Generate(p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

func TestChatSessionsGrowAsAlternatingMessages(t *testing.T) {
	reqs, err := Generate(WorkloadParams{Kind: Chat, Groups: 3, PrefixWords: 10, QuestionWords: 4, Rate: 5, Requests: 40, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	last := map[int][]ChatMessage{}
	for _, r := range reqs {
		m := r.Messages
		if r.Prompt != "" || len(m) == 0 || m[0].Role != "system" || len(strings.Fields(m[0].Content)) != 12 {
			t.Fatalf("request %+v: want a chat request opening with the session's system message", r)
		}
		for i, msg := range m[1:] {
			want := []string{"user", "assistant"}[i%2]
			if msg.Role != want {
				t.Fatalf("message %d is %s, want %s", i+1, msg.Role, want)
			}
		}
		if m[len(m)-1].Role != "user" {
			t.Fatal("a request must end with the user's turn")
		}
		// Each request extends its session's previous one by an answer and a question.
		if prev, ok := last[r.Session]; ok && (len(m) != len(prev)+2 || !reflect.DeepEqual(m[:len(prev)], prev)) {
			t.Fatalf("session %d: %d messages after %d, or history rewritten", r.Session, len(m), len(prev))
		}
		last[r.Session] = m
	}
	if len(last) != 3 {
		t.Fatalf("%d sessions, want 3", len(last))
	}
}

func TestEvictionDocumentsFollowZipf(t *testing.T) {
	const docs, n = 10, 20000
	reqs, err := Generate(WorkloadParams{Kind: Eviction, Groups: docs, PrefixWords: 8, QuestionWords: 3, ZipfS: 1, Rate: 50, Requests: n, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	count := make([]int, docs)
	text := map[int]string{}
	for _, r := range reqs {
		doc, _, _ := strings.Cut(r.Prompt, "\nQuestion: ")
		if prev, ok := text[r.Session]; ok && prev != doc {
			t.Fatalf("document %d has two texts", r.Session)
		}
		text[r.Session] = doc
		count[r.Session]++
	}
	// P(k) = (1/(k+1)) / H(10), H(10) ≈ 2.929: document 0 ≈ 34.1 %, 1 ≈ 17.1 %,
	// 9 ≈ 3.4 %; 20,000 draws from a fixed seed hold each within ±1 point.
	for _, c := range []struct {
		k    int
		want float64
	}{{0, 0.3414}, {1, 0.1707}, {4, 0.0683}, {9, 0.0341}} {
		if got := float64(count[c.k]) / n; math.Abs(got-c.want) > 0.01 {
			t.Errorf("document %d drawn %.4f of the time, want %.4f", c.k, got, c.want)
		}
	}
	// Exponent 0 is uniform.
	reqs, _ = Generate(WorkloadParams{Kind: Eviction, Groups: 4, PrefixWords: 2, ZipfS: 0, Rate: 50, Requests: 8000, Seed: 3})
	uni := make([]int, 4)
	for _, r := range reqs {
		uni[r.Session]++
	}
	for k, c := range uni {
		if c < 1800 || c > 2200 {
			t.Errorf("uniform: document %d drawn %d of 8000", k, c)
		}
	}
}

func TestTenantsShareTextButNotNamespaces(t *testing.T) {
	const docs, tenants, adapters = 2, 2, 3
	reqs, err := Generate(WorkloadParams{Kind: Tenants, Groups: docs, PrefixWords: 20, QuestionWords: 3, Tenants: tenants, Adapters: adapters, Rate: 20, Requests: 600, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	spaces := map[string]int{}
	docText := map[string]bool{}
	for _, r := range reqs {
		if (r.CacheSalt == "") == (r.Model == "") {
			t.Fatalf("request with salt %q and adapter %q: want exactly one", r.CacheSalt, r.Model)
		}
		if r.Model != "" && !strings.HasPrefix(r.Model, "adapter-") {
			t.Fatalf("adapter %q", r.Model)
		}
		doc, _, _ := strings.Cut(r.Prompt, "\nQuestion: ")
		docText[doc] = true
		spaces[r.CacheSalt+"|"+r.Model]++
	}
	// The same two documents under 2 salts + 3 adapters, every namespace used
	// about equally (600/5 = 120 each).
	if len(docText) != docs || len(spaces) != tenants+adapters {
		t.Fatalf("%d document texts, %d namespaces: want %d and %d", len(docText), len(spaces), docs, tenants+adapters)
	}
	for ns, c := range spaces {
		if c < 80 || c > 160 {
			t.Errorf("namespace %q used %d times of 600", ns, c)
		}
	}
}
