package routebench

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestGenerateIsDeterministicPerSeed(t *testing.T) {
	for _, kind := range []string{SharedPrefix, MultiTurn, NoSharing} {
		p := WorkloadParams{Kind: kind, Groups: 3, UsersPerGroup: 4, PrefixWords: 30, QuestionWords: 5, Rate: 10, Requests: 25, MaxTokens: 4, Seed: 7}
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
	} {
		if _, err := Generate(p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
