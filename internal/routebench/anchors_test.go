package routebench

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestStickyChoiceSkipsDownEngines(t *testing.T) {
	up := func(i int) bool { return i != 1 }
	// Engine 1 holds the longest prefix but is down: the affinity goes to
	// the longest holder that is up.
	if e, why := StickyChoice([]int{0, 6, 4, 4}, []int{0, 0, 9, 3}, up, 100, 0); e != 3 || why != StickyHeld {
		t.Fatalf("engine %d (%s), want 3 (sticky)", e, why)
	}
	if e, why := StickyChoice([]int{0, 0}, []int{0, 0}, func(int) bool { return false }, 100, 0); e != -1 || why != StickyNoPrefix {
		t.Fatalf("all down: engine %d (%s), want -1", e, why)
	}
}

func TestStickyThreshold(t *testing.T) {
	if n := StickyThreshold(800*time.Millisecond, 50*time.Microsecond); n != 16000 {
		t.Fatalf("0.8 s at 50 µs a token: %d tokens, want 16000", n)
	}
}

func TestTraceWorkloadKeepsTheTracesSharing(t *testing.T) {
	tr := &TraceReplay{BlockWords: 5,
		At:     []time.Duration{0, time.Second, 3 * time.Second},
		Blocks: [][]int64{{1, 2, 3}, {1, 2, 4, 5}, {9}}}
	reqs, err := Generate(WorkloadParams{Kind: Trace, Trace: tr, Rate: 2, Requests: 3, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	// Mean rate 2 req/s: 2 gaps over 3 s recorded become 1 s.
	if reqs[2].At != time.Second || reqs[1].At != time.Second/3 {
		t.Fatalf("arrivals %v, %v", reqs[1].At, reqs[2].At)
	}
	a, b, c := strings.Fields(reqs[0].Prompt), strings.Fields(reqs[1].Prompt), strings.Fields(reqs[2].Prompt)
	if len(a) != 15 || len(b) != 20 || len(c) != 5 {
		t.Fatalf("words %d, %d, %d; want 5 per block", len(a), len(b), len(c))
	}
	if strings.Join(a[:10], " ") != strings.Join(b[:10], " ") || strings.Join(a[10:], " ") == strings.Join(b[10:15], " ") {
		t.Fatal("requests sharing two blocks must share exactly their text")
	}
	again, _ := Generate(WorkloadParams{Kind: Trace, Trace: tr, Rate: 2, Requests: 3, MaxTokens: 4})
	if again[1].Prompt != reqs[1].Prompt {
		t.Fatal("a block's text must not depend on the run")
	}
}

// TestAnchorsBooksFollowTheGateway sends requests through a PolicyGateway
// over loopback HTTP to two upstreams: each anchor counts a request on its
// engine while the upstream holds it and takes it off its books when the
// response has ended.
func TestAnchorsBooksFollowTheGateway(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 4)
	var ups []string
	for range 2 {
		u, stop, err := ServeLoopback(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-release
			io.WriteString(w, `{"choices":[]}`)
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		ups = append(ups, strings.TrimPrefix(u, "http://"))
	}
	// Engine 1 holds the prompt's first 2 blocks of 16 tokens.
	x := exactCache{BlockSize: 16,
		Encode:       func(r PickRequest) []int { return make([]int, len(strings.Fields(r.Prompt))) },
		CachedTokens: func(i int, ids []int, _, _ string) int { return []int{0, 32}[i] }}
	sticky := &LLMDSticky{exactCache: x, Threshold: 1 << 20}
	dynamo := &DynamoKV{exactCache: x, Weight: 1}
	for _, pol := range []Tracker{sticky, dynamo} {
		g := NewPolicyGateway(pol, ups)
		url, stop, err := ServeLoopback(g)
		if err != nil {
			t.Fatal(err)
		}
		prompt := strings.Repeat("w ", 80) // 80 tokens: 48 uncached on engine 1
		done := make(chan error, 1)
		go func() {
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"`+prompt+`"}`))
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		<-arrived
		books := func() (int, int) {
			switch p := pol.(type) {
			case *LLMDSticky:
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.load[1], p.load[0]
			case *DynamoKV:
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.prefill[1], p.prefill[0]
			}
			return -1, -1
		}
		if on1, on0 := books(); on1 != 48 || on0 != 0 {
			t.Errorf("%s in flight: books %d on the holder, %d elsewhere; want 48, 0", pol.Name(), on1, on0)
		}
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The gateway releases after its handler returns, which may be just
		// after the client has the response.
		deadline := time.Now().Add(2 * time.Second)
		on1, _ := books()
		for on1 != 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			on1, _ = books()
		}
		if on1 != 0 {
			t.Errorf("%s after the response: %d tokens still on the books", pol.Name(), on1)
		}
		if served := g.Served(); served[1] != 1 {
			t.Errorf("%s: served %v, want the holder", pol.Name(), served)
		}
		stop()
	}
}
