// Command flowload sends N completions at once through a gateway and
// reports how each ended: by HTTP status, the count and the longest time to
// its answer; a request still unanswered after --timeout counts as
// "no answer". scripts/flow-memory.sh drives it against kvroute with flow
// control on and off (docs/BENCHMARKS.md, Flow control).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/v1/completions", "the gateway's completions URL")
	n := flag.Int("n", 1500, "requests, all sent at once")
	kib := flag.Int("body-kib", 32, "each request's prompt, in KiB of text")
	model := flag.String("model", "m", "the model requested")
	timeout := flag.Duration("timeout", 15*time.Second, "give up on a request after this long")
	flag.Parse()
	words := strings.Repeat("lorem ipsum dolor sit amet consectetur ", *kib*1024/39+1)[:*kib*1024]
	type result struct {
		status int
		took   time.Duration
	}
	results := make([]result, *n)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: *n}}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range *n {
		wg.Go(func() {
			// Each prompt is its own: no two share a prefix.
			body := fmt.Sprintf(`{"model":%q,"prompt":"%d %s","max_tokens":4}`, *model, i, words)
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, *url, strings.NewReader(body))
			if err != nil {
				results[i] = result{-1, time.Since(start)}
				return
			}
			req.Header.Set("content-type", "application/json")
			t0 := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				results[i] = result{0, time.Since(t0)}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results[i] = result{resp.StatusCode, time.Since(t0)}
		})
	}
	wg.Wait()
	by := map[int][]time.Duration{}
	for _, r := range results {
		by[r.status] = append(by[r.status], r.took)
	}
	statuses := make([]int, 0, len(by))
	for s := range by {
		statuses = append(statuses, s)
	}
	sort.Ints(statuses)
	for _, s := range statuses {
		ts := by[s]
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		name := fmt.Sprint(s)
		if s == 0 {
			name = "no answer"
		}
		fmt.Fprintf(os.Stdout, "%s: %d requests, answered after %v .. %v\n", name, len(ts), ts[0].Round(time.Millisecond), ts[len(ts)-1].Round(time.Millisecond))
	}
}
