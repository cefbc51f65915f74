package routebench

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func idle(n int) FleetView { return FleetView{InFlight: make([]int, n)} }

func TestRoundRobinCycles(t *testing.T) {
	p := &RoundRobin{}
	var got []int
	for range 7 {
		got = append(got, p.Pick(Text("x"), idle(3)))
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !slices.Equal(got, want) {
		t.Fatalf("picks %v, want %v", got, want)
	}
}

func TestRandomIsSeededAndCoversEveryReplica(t *testing.T) {
	a, b := NewRandom(5), NewRandom(5)
	counts := make([]int, 4)
	for range 400 {
		i := a.Pick(Text(""), idle(4))
		if j := b.Pick(Text(""), idle(4)); i != j {
			t.Fatal("same seed, different picks")
		}
		counts[i]++
	}
	for i, n := range counts {
		if n < 50 {
			t.Fatalf("replica %d picked %d of 400 times", i, n)
		}
	}
}

func TestLeastLoadedPicksFewestInFlightAndSpreadsTies(t *testing.T) {
	p := &LeastLoaded{}
	if got := p.Pick(Text(""), FleetView{InFlight: []int{3, 1, 2}}); got != 1 {
		t.Fatalf("picked %d, want 1", got)
	}
	seen := map[int]bool{}
	for range 3 {
		seen[p.Pick(Text(""), idle(3))] = true
	}
	if len(seen) != 3 {
		t.Fatalf("ties went to %v, want all three replicas", seen)
	}
}

func TestApproxPrefixFollowsItsHistory(t *testing.T) {
	p := &ApproxPrefix{ChunkChars: 8, CharsPerToken: 4, LoadWeight: 1, Capacity: 100}
	doc := strings.Repeat("abcdefgh", 20)
	first := p.Pick(Text(doc+"q1"), idle(3))
	other := p.Pick(Text("something else entirely, long enough"), FleetView{InFlight: []int{0, 0, 0}})
	if other == first {
		t.Fatalf("an unrelated prompt followed the history to %d", first)
	}
	// Same document, every replica equally busy: history wins.
	if got := p.Pick(Text(doc+"q2"), FleetView{InFlight: []int{1, 1, 1}}); got != first {
		t.Fatalf("picked %d, want %d (holds the prefix)", got, first)
	}
	// Load outweighs the prefix: 40 cached tokens < 100 queued requests × 1.
	busy := []int{0, 0, 0}
	busy[first] = 100
	if got := p.Pick(Text(doc+"q3"), FleetView{InFlight: busy}); got == first {
		t.Fatal("followed the prefix onto a replica 100 requests deep")
	}
}

func TestApproxPrefixLRUIsBounded(t *testing.T) {
	p := &ApproxPrefix{ChunkChars: 8, CharsPerToken: 4, Capacity: 3}
	p.Pick(Text(strings.Repeat("abcdefgh", 10)), idle(1))
	if n := p.lrus[0].Len(); n != 3 || len(p.sets[0]) != 3 {
		t.Fatalf("LRU holds %d (%d), want 3", n, len(p.sets[0]))
	}
}

func TestChunkHashesChainAndSkipThePartialChunk(t *testing.T) {
	a := chunkHashes("", "", "aaaabbbbcc", 4)
	b := chunkHashes("", "", "xxxxbbbb", 4)
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("chunks %d and %d, want 2 each", len(a), len(b))
	}
	if a[1] == b[1] {
		t.Fatal("equal chunks after different parents hash alike: not chained")
	}
	if c := chunkHashes("", "", "aaaabbbbzz", 4); c[0] != a[0] || c[1] != a[1] {
		t.Fatal("the same prefix hashes differently")
	}
}

func TestGreedyCacheAwarePicksTheLongestRealPrefixUnlessLoadOutweighsIt(t *testing.T) {
	cached := []int{16, 64, 32}
	queue := []int{0, 0, 0}
	o := &GreedyCacheAware{
		Encode:       func(r PickRequest) []int { return make([]int, len(r.Prompt)) },
		CachedTokens: func(i int, ids []int, _, _ string) int { return min(cached[i], len(ids)) },
		Queue:        func(i int) int { return queue[i] },
		LoadWeight:   10,
	}
	prompt := strings.Repeat("x", 100)
	if got := o.Pick(Text(prompt), idle(3)); got != 1 {
		t.Fatalf("picked %d, want 1 (64 cached tokens)", got)
	}
	queue[1] = 4 // 64-40 = 24 net < 32: replica 2 wins
	if got := o.Pick(Text(prompt), idle(3)); got != 2 {
		t.Fatalf("picked %d, want 2 once replica 1 is 4 requests deep", got)
	}
	// The gateway's own in-flight count counts when above the engine's queue.
	queue[1] = 0
	if got := o.Pick(Text(prompt), FleetView{InFlight: []int{0, 5, 0}}); got != 2 {
		t.Fatalf("picked %d, want 2 with 5 requests in flight to 1", got)
	}
}

// The approximate prefix plugin hashes a chat request's messages as their
// JSON array, and roots the chain in the model name and cache salt: the same
// text under another adapter or salt shares no chunk.
func TestApproxPrefixHashesWhatTheGatewayHashes(t *testing.T) {
	chat := PickRequest{Messages: []ChatMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi \"there\""}}}
	if got, want := approxInput(chat), `[{"role":"system","content":"be brief"},{"role":"user","content":"hi \"there\""}]`; got != want {
		t.Fatalf("chat input %s, want %s", got, want)
	}
	if got := approxInput(Text("plain")); got != "plain" {
		t.Fatalf("completion input %q", got)
	}
	text := strings.Repeat("0123456789", 4)
	base := chunkHashes("qwen3", "", text, 8)
	for _, c := range []struct{ model, salt string }{{"adapter-0", ""}, {"qwen3", "tenant-0"}} {
		other := chunkHashes(c.model, c.salt, text, 8)
		for i := range base {
			if other[i] == base[i] {
				t.Fatalf("%+v: chunk %d hashes like the base model's", c, i)
			}
		}
	}
	if again := chunkHashes("qwen3", "", text, 8); !reflect.DeepEqual(again, base) {
		t.Fatal("not deterministic")
	}
}

func TestPoliciesSkipDownReplicas(t *testing.T) {
	v := FleetView{InFlight: []int{0, 0, 0}, Down: []bool{false, true, false}}
	pols := []Policy{&RoundRobin{}, &LeastLoaded{}, NewRandom(1), NewApproxPrefix(256)}
	for _, p := range pols {
		for k := range 20 {
			if got := p.Pick(Text(fmt.Sprint("prompt ", k)), v); got == 1 {
				t.Fatalf("%s picked the down replica", p.Name())
			}
		}
	}
}
