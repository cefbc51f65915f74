// Package routebench measures routing quality: it drives an emulated vLLM
// fleet with generated workloads under several routing policies and reports
// prefix-cache hit rate, time to first token and load balance per policy.
package routebench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Workload kinds.
const (
	// SharedPrefix: Groups long shared documents, UsersPerGroup users each
	// asking short questions about their group's document (RAG, system prompts).
	SharedPrefix = "shared-prefix"
	// MultiTurn: sessions whose prompt grows turn by turn (chat history).
	MultiTurn = "multi-turn"
	// NoSharing: every prompt unique; the control where routing on prefixes
	// cannot help and must not hurt.
	NoSharing = "no-sharing"
	// Chat: multi-turn sessions sent to /v1/chat/completions as messages (a
	// system prompt, then alternating user and assistant turns), rendered by
	// the engines with the model's chat template.
	Chat = "chat"
	// Eviction: Groups documents drawn with Zipf popularity (exponent ZipfS),
	// sized so that together they exceed the fleet's KV several times:
	// popular documents should stay cached, the tail is evicted and recomputed.
	Eviction = "eviction"
	// Tenants: shared documents requested under Tenants cache_salt values and
	// Adapters LoRA adapter names: the same text, different KV (vLLM puts the
	// salt in block 0's hash and the adapter name in every block's).
	Tenants = "tenants"
	// Trace: a recorded trace's requests (WorkloadParams.Trace) at their
	// recorded arrival pattern, sped up to Rate; every 512-token block of
	// the trace becomes its own BlockWords words of text (equal ids, equal
	// text), so requests share exactly the prefixes they share in the trace.
	Trace = "trace"
)

// Kinds lists every workload kind, in report order.
var Kinds = []string{SharedPrefix, MultiTurn, NoSharing, Chat, Eviction, Tenants}

// WorkloadParams describe a generated workload; every figure in
// docs/BENCHMARKS.md names the parameters that produced it.
type WorkloadParams struct {
	Kind          string
	Groups        int     // shared-prefix groups, or multi-turn sessions
	UsersPerGroup int     // shared-prefix users per group
	PrefixWords   int     // words in a shared document / a session's system prompt
	QuestionWords int     // words in a question / a turn
	Rate          float64 // mean arrivals per second (Poisson)
	Requests      int     // requests to generate
	MaxTokens     int     // output tokens per request
	Seed          uint64
	// ZipfS is the eviction workload's popularity exponent: document k (from
	// 0) is drawn with weight 1/(k+1)^ZipfS (0: uniform).
	ZipfS float64
	// Tenants and Adapters (tenants workload): each request picks one of
	// Tenants cache_salt values or Adapters LoRA adapters, uniformly.
	Tenants  int
	Adapters int
	// Trace is the trace workload's requests.
	Trace *TraceReplay
}

// TraceReplay is a recorded trace cut for the real-socket benchmark.
type TraceReplay struct {
	At         []time.Duration // arrivals as recorded, from the first
	Blocks     [][]int64       // each request's hash ids
	BlockWords int             // words of text per hash id
}

// AdapterName is the LoRA adapter name of adapter i, as the emulated engines
// and kvroute's config list them.
func AdapterName(i int) string { return fmt.Sprintf("adapter-%d", i) }

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one generated request, sent at At after the run starts.
type Request struct {
	At      time.Duration
	Session int    // group or session number, for reporting
	Prompt  string // completion prompt text ("" for chat requests)
	// Messages, when set, make this a /v1/chat/completions request.
	Messages  []ChatMessage
	Model     string // a LoRA adapter name; "": the base model
	CacheSalt string // vLLM's cache_salt; "": none
	MaxTokens int
}

// Generate builds the workload's requests in arrival order.
func Generate(p WorkloadParams) ([]Request, error) {
	if p.Rate <= 0 || p.Requests <= 0 {
		return nil, fmt.Errorf("routebench: rate and requests must be positive")
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x6b76726f757465))
	out := make([]Request, 0, p.Requests)
	var at time.Duration
	next := func() time.Duration {
		at += time.Duration(rng.ExpFloat64() / p.Rate * float64(time.Second))
		return at
	}
	switch p.Kind {
	case SharedPrefix:
		if p.Groups <= 0 || p.UsersPerGroup <= 0 {
			return nil, fmt.Errorf("routebench: shared-prefix needs groups and users per group")
		}
		docs := make([]string, p.Groups)
		for g := range docs {
			docs[g] = fmt.Sprintf("Document %d. ", g) + words(rng, p.PrefixWords)
		}
		for i := 0; i < p.Requests; i++ {
			g := rng.IntN(p.Groups)
			u := rng.IntN(p.UsersPerGroup)
			prompt := docs[g] + fmt.Sprintf("\nUser %d asks: ", u) + words(rng, p.QuestionWords) + "?"
			out = append(out, Request{At: next(), Session: g, Prompt: prompt, MaxTokens: p.MaxTokens})
		}
	case MultiTurn:
		if p.Groups <= 0 {
			return nil, fmt.Errorf("routebench: multi-turn needs sessions (groups)")
		}
		history := make([]string, p.Groups)
		for s := range history {
			history[s] = fmt.Sprintf("System: session %d. ", s) + words(rng, p.PrefixWords)
		}
		for i := 0; i < p.Requests; i++ {
			s := rng.IntN(p.Groups)
			history[s] += "\nUser: " + words(rng, p.QuestionWords) + "\nAssistant: " + words(rng, p.QuestionWords/2+1)
			out = append(out, Request{At: next(), Session: s, Prompt: history[s], MaxTokens: p.MaxTokens})
		}
	case NoSharing:
		for i := 0; i < p.Requests; i++ {
			prompt := fmt.Sprintf("Request %d. ", i) + words(rng, p.PrefixWords+p.QuestionWords)
			out = append(out, Request{At: next(), Session: i, Prompt: prompt, MaxTokens: p.MaxTokens})
		}
	case Chat:
		if p.Groups <= 0 {
			return nil, fmt.Errorf("routebench: chat needs sessions (groups)")
		}
		history := make([][]ChatMessage, p.Groups)
		for s := range history {
			history[s] = []ChatMessage{{Role: "system", Content: fmt.Sprintf("Session %d. ", s) + words(rng, p.PrefixWords)}}
		}
		for i := 0; i < p.Requests; i++ {
			s := rng.IntN(p.Groups)
			if len(history[s]) > 1 {
				// The previous answer joins the history before the next question.
				history[s] = append(history[s], ChatMessage{Role: "assistant", Content: words(rng, p.QuestionWords/2+1)})
			}
			history[s] = append(history[s], ChatMessage{Role: "user", Content: words(rng, p.QuestionWords) + "?"})
			out = append(out, Request{At: next(), Session: s, Messages: slices.Clone(history[s]), MaxTokens: p.MaxTokens})
		}
	case Eviction:
		if p.Groups <= 0 || p.ZipfS < 0 {
			return nil, fmt.Errorf("routebench: eviction needs documents (groups) and a Zipf exponent ≥ 0")
		}
		docs := make([]string, p.Groups)
		for g := range docs {
			docs[g] = fmt.Sprintf("Document %d. ", g) + words(rng, p.PrefixWords)
		}
		pick := zipf(p.Groups, p.ZipfS)
		for i := 0; i < p.Requests; i++ {
			g := pick(rng)
			prompt := docs[g] + "\nQuestion: " + words(rng, p.QuestionWords) + "?"
			out = append(out, Request{At: next(), Session: g, Prompt: prompt, MaxTokens: p.MaxTokens})
		}
	case Tenants:
		if p.Groups <= 0 || p.Tenants < 0 || p.Adapters < 0 || p.Tenants+p.Adapters == 0 {
			return nil, fmt.Errorf("routebench: tenants needs documents (groups) and at least one tenant or adapter")
		}
		docs := make([]string, p.Groups)
		for g := range docs {
			docs[g] = fmt.Sprintf("Document %d. ", g) + words(rng, p.PrefixWords)
		}
		for i := 0; i < p.Requests; i++ {
			g := rng.IntN(p.Groups)
			v := rng.IntN(p.Tenants + p.Adapters)
			r := Request{At: next(), Prompt: docs[g] + "\nQuestion: " + words(rng, p.QuestionWords) + "?", MaxTokens: p.MaxTokens}
			if v < p.Tenants {
				r.CacheSalt = fmt.Sprintf("tenant-%d", v)
			} else {
				r.Model = AdapterName(v - p.Tenants)
			}
			// One session per (document, KV namespace): what can share blocks.
			r.Session = g*(p.Tenants+p.Adapters) + v
			out = append(out, r)
		}
	case Trace:
		t := p.Trace
		if t == nil || len(t.At) == 0 || len(t.At) != len(t.Blocks) || t.BlockWords < 1 {
			return nil, fmt.Errorf("routebench: trace needs requests and words per block")
		}
		n := min(p.Requests, len(t.At))
		// Speed the recorded arrivals up (or down) to a mean of Rate: scale
		// is the recorded mean rate over Rate.
		scale := 1.0
		if span := (t.At[n-1] - t.At[0]).Seconds(); span > 0 && n > 1 {
			scale = float64(n-1) / span / p.Rate
		}
		texts := map[int64]string{}
		for i := range n {
			parts := make([]string, len(t.Blocks[i]))
			for j, h := range t.Blocks[i] {
				if _, ok := texts[h]; !ok {
					texts[h] = words(rand.New(rand.NewPCG(uint64(h), 0x626c6f636b)), t.BlockWords)
				}
				parts[j] = texts[h]
			}
			at := time.Duration(float64(t.At[i]-t.At[0]) * scale)
			out = append(out, Request{At: at, Session: i, Prompt: strings.Join(parts, " "), MaxTokens: p.MaxTokens})
		}
	default:
		return nil, fmt.Errorf("routebench: unknown workload %q (want one of %s)", p.Kind, strings.Join(Kinds, ", "))
	}
	return out, nil
}

// vocabulary is a small fixed word list: prompts read like text to a
// tokenizer (common words are single tokens) yet are generated, not copied.
var vocabulary = strings.Fields(`the of and to in is that for it as with was on be by this are
from at or an have not which one all were they but we can more has their there been if when
will would who so what about out up into time only other its some could new these two may
first then do any like my now over such our man me even most made after also did many before
must through back years where much your way well down should because each just those people
how too little state good very make world still own see men work long get here between both
life being under never day same another know while last might us great old year off come since
against go came right used take three cache block token route prefix replica engine request
model layer memory server queue latency batch prompt decode prefill weight`)

// zipf returns a sampler of 0..n-1 with P(k) ∝ 1/(k+1)^s (any s ≥ 0, unlike
// math/rand's Zipf, which needs s > 1).
func zipf(n int, s float64) func(*rand.Rand) int {
	cum := make([]float64, n)
	total := 0.0
	for k := range cum {
		total += 1 / math.Pow(float64(k+1), s)
		cum[k] = total
	}
	return func(rng *rand.Rand) int {
		u := rng.Float64() * total
		k, _ := slices.BinarySearch(cum, u)
		return min(k, n-1)
	}
}

func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return b.String()
}
