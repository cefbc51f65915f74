package routebench

import (
	"slices"
	"strings"
	"testing"
)

func idle(n int) FleetView { return FleetView{InFlight: make([]int, n)} }

func TestRoundRobinCycles(t *testing.T) {
	p := &RoundRobin{}
	var got []int
	for range 7 {
		got = append(got, p.Pick("x", idle(3)))
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !slices.Equal(got, want) {
		t.Fatalf("picks %v, want %v", got, want)
	}
}

func TestRandomIsSeededAndCoversEveryReplica(t *testing.T) {
	a, b := NewRandom(5), NewRandom(5)
	counts := make([]int, 4)
	for range 400 {
		i := a.Pick("", idle(4))
		if j := b.Pick("", idle(4)); i != j {
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
	if got := p.Pick("", FleetView{InFlight: []int{3, 1, 2}}); got != 1 {
		t.Fatalf("picked %d, want 1", got)
	}
	seen := map[int]bool{}
	for range 3 {
		seen[p.Pick("", idle(3))] = true
	}
	if len(seen) != 3 {
		t.Fatalf("ties went to %v, want all three replicas", seen)
	}
}

func TestApproxPrefixFollowsItsHistory(t *testing.T) {
	p := &ApproxPrefix{ChunkChars: 8, CharsPerToken: 4, LoadWeight: 1, Capacity: 100}
	doc := strings.Repeat("abcdefgh", 20)
	first := p.Pick(doc+"q1", idle(3))
	other := p.Pick("something else entirely, long enough", FleetView{InFlight: []int{0, 0, 0}})
	if other == first {
		t.Fatalf("an unrelated prompt followed the history to %d", first)
	}
	// Same document, every replica equally busy: history wins.
	if got := p.Pick(doc+"q2", FleetView{InFlight: []int{1, 1, 1}}); got != first {
		t.Fatalf("picked %d, want %d (holds the prefix)", got, first)
	}
	// Load outweighs the prefix: 40 cached tokens < 100 queued requests × 1.
	busy := []int{0, 0, 0}
	busy[first] = 100
	if got := p.Pick(doc+"q3", FleetView{InFlight: busy}); got == first {
		t.Fatal("followed the prefix onto a replica 100 requests deep")
	}
}

func TestApproxPrefixLRUIsBounded(t *testing.T) {
	p := &ApproxPrefix{ChunkChars: 8, CharsPerToken: 4, Capacity: 3}
	p.Pick(strings.Repeat("abcdefgh", 10), idle(1))
	if n := p.lrus[0].Len(); n != 3 || len(p.sets[0]) != 3 {
		t.Fatalf("LRU holds %d (%d), want 3", n, len(p.sets[0]))
	}
}

func TestChunkHashesChainAndSkipThePartialChunk(t *testing.T) {
	a := chunkHashes("aaaabbbbcc", 4)
	b := chunkHashes("xxxxbbbb", 4)
	if len(a) != 2 || len(b) != 2 {
		t.Fatalf("chunks %d and %d, want 2 each", len(a), len(b))
	}
	if a[1] == b[1] {
		t.Fatal("equal chunks after different parents hash alike: not chained")
	}
	if c := chunkHashes("aaaabbbbzz", 4); c[0] != a[0] || c[1] != a[1] {
		t.Fatal("the same prefix hashes differently")
	}
}

func TestOraclePicksTheLongestRealPrefixUnlessLoadOutweighsIt(t *testing.T) {
	cached := []int{16, 64, 32}
	queue := []int{0, 0, 0}
	o := &Oracle{
		Encode:       func(p string) []int { return make([]int, len(p)) },
		CachedTokens: func(i int, ids []int) int { return min(cached[i], len(ids)) },
		Queue:        func(i int) int { return queue[i] },
		LoadWeight:   10,
	}
	prompt := strings.Repeat("x", 100)
	if got := o.Pick(prompt, idle(3)); got != 1 {
		t.Fatalf("picked %d, want 1 (64 cached tokens)", got)
	}
	queue[1] = 4 // 64-40 = 24 net < 32: replica 2 wins
	if got := o.Pick(prompt, idle(3)); got != 2 {
		t.Fatalf("picked %d, want 2 once replica 1 is 4 requests deep", got)
	}
	// The gateway's own in-flight count counts when above the engine's queue.
	queue[1] = 0
	if got := o.Pick(prompt, FleetView{InFlight: []int{0, 5, 0}}); got != 2 {
		t.Fatalf("picked %d, want 2 with 5 requests in flight to 1", got)
	}
}
