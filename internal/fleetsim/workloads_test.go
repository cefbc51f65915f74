package fleetsim

import (
	"math"
	"reflect"
	"slices"
	"testing"
)

func familyByName(t *testing.T, name string) Family {
	t.Helper()
	for _, f := range DefaultFamilies() {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no family %s", name)
	return Family{}
}

func TestFamiliesAreDeterministicPerSeed(t *testing.T) {
	for _, f := range DefaultFamilies() {
		a, err := f.Generate(1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := f.Generate(1)
		c, _ := f.Generate(2)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: two generations at seed 1 differ", f.Name)
		}
		if reflect.DeepEqual(a, c) {
			t.Errorf("%s: seeds 1 and 2 give the same records", f.Name)
		}
		if len(a) != f.Requests {
			t.Errorf("%s: %d records, want %d", f.Name, len(a), f.Requests)
		}
		for i := 1; i < len(a); i++ {
			if a[i].Timestamp < a[i-1].Timestamp {
				t.Fatalf("%s: record %d arrives before %d", f.Name, i, i-1)
			}
		}
		for _, r := range a {
			if r.OutputLength < f.OutputMin || r.OutputLength > f.OutputMax {
				t.Fatalf("%s: output %d outside %d..%d", f.Name, r.OutputLength, f.OutputMin, f.OutputMax)
			}
		}
	}
}

// sharedLead is how many leading hash ids a and b share.
func sharedLead(a, b []int64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestAgenticFamily(t *testing.T) {
	f := familyByName(t, FamilyAgentic)
	recs, _ := f.Generate(1)
	branched := 0
	for i, r := range recs {
		if r.InputLength < 50_000 || r.InputLength > 200_000 {
			t.Fatalf("request %d: %d tokens, want 50k–200k", i, r.InputLength)
		}
		if !slices.Equal(r.HashIDs[:f.SystemBlocks], recs[0].HashIDs[:f.SystemBlocks]) {
			t.Fatalf("request %d does not open with the shared tool prompt", i)
		}
	}
	// Sessions grow turn by turn: most requests extend an earlier one
	// whole; sub-agents branch: two requests share a long context and then
	// differ, neither a prefix of the other.
	extends := 0
	for i := 1; i < len(recs); i++ {
		for j := i - 1; j >= 0 && j >= i-60; j-- {
			n := sharedLead(recs[i].HashIDs, recs[j].HashIDs)
			if n == len(recs[j].HashIDs) && n < len(recs[i].HashIDs) {
				extends++
				break
			}
			if n > f.SystemBlocks+f.ContextMin && n < len(recs[j].HashIDs) && n < len(recs[i].HashIDs) {
				branched++
				break
			}
		}
	}
	if extends < len(recs)/2 || branched == 0 {
		t.Fatalf("%d of %d requests extend an earlier one, %d branch", extends, len(recs), branched)
	}
}

func TestRAGFamilyExceedsTheFleet(t *testing.T) {
	f := familyByName(t, FamilyRAG)
	o := DefaultOptions()
	if docs, fleet := f.Documents*f.DocBlocks*TraceBlockTokens, o.Engines*o.KVBlocks*o.BlockSize; docs <= fleet {
		t.Fatalf("documents hold %d tokens, the fleet's KV %d: want more", docs, fleet)
	}
	recs, _ := f.Generate(1)
	seen := map[int64]int{} // a document's first block → requests
	for _, r := range recs {
		if len(r.HashIDs) != f.SystemBlocks+f.DocBlocks+f.QueryBlocks {
			t.Fatalf("%d blocks, want system + document + query", len(r.HashIDs))
		}
		seen[r.HashIDs[f.SystemBlocks]]++
	}
	counts := slices.Sorted(func(yield func(int) bool) {
		for _, n := range seen {
			if !yield(n) {
				return
			}
		}
	})
	slices.Reverse(counts)
	// Zipf s=0.9 over 1,200 documents: the top one draws ≈ 9 % of requests.
	if top := float64(counts[0]) / float64(len(recs)); top < 0.04 || top > 0.2 {
		t.Fatalf("the most popular document draws %.1f %% of requests", 100*top)
	}
	// …and a long tail: over a third of the draws are distinct documents.
	if len(seen) < len(recs)/3 {
		t.Fatalf("only %d distinct documents in %d draws", len(seen), len(recs))
	}
}

func TestTenantsFamily(t *testing.T) {
	f := familyByName(t, FamilyTenants)
	recs, _ := f.Generate(3)
	prefixes := map[int64]bool{}
	for _, r := range recs {
		n := len(r.HashIDs)
		if n < f.DocBlocks+f.QueryBlocks || n > f.DocBlocksMax+f.QueryBlocksMax {
			t.Fatalf("%d blocks outside the family's bounds", n)
		}
		prefixes[r.HashIDs[0]] = true
	}
	if len(prefixes) > f.Documents || len(prefixes) < f.Documents/2 {
		t.Fatalf("%d tenant prompts in use of %d", len(prefixes), f.Documents)
	}
}

func TestBurstsFamilyRate(t *testing.T) {
	f := familyByName(t, FamilyBursts)
	recs, _ := f.Generate(1)
	span := float64(recs[len(recs)-1].Timestamp) / 1000
	inBurst := 0
	for _, r := range recs {
		if math.Mod(float64(r.Timestamp)/1000, f.CycleSeconds) < f.BurstSeconds {
			inBurst++
		}
	}
	mean := float64(len(recs)) / span
	burstTime := span * f.BurstSeconds / f.CycleSeconds
	ratio := float64(inBurst) / burstTime / mean
	if ratio < 2.4 || ratio > 3.6 {
		t.Fatalf("burst rate %.2f× the mean, want ≈ %g×", ratio, f.BurstFactor)
	}
	if mean < 0.8*f.Rate || mean > 1.2*f.Rate {
		t.Fatalf("mean rate %.1f req/s, want ≈ %g", mean, f.Rate)
	}
}

func TestNoSharingFamilySharesNothing(t *testing.T) {
	f := familyByName(t, FamilyNoSharing)
	recs, _ := f.Generate(1)
	src := &TraceSource{Records: recs}
	if r := idealRate(src, 64); r != 0 {
		t.Fatalf("ideal hit rate %.3f, want 0", r)
	}
}
