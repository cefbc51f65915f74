// Package fleetsim is kvroute-bench's fleet simulator: a discrete-event
// simulation on a virtual clock that drives kvroute's real index, ingest
// apply path and router against simulated vLLM engines (internal/vllmemu's
// Virtual engine: its paged prefix cache, scheduler and latency model), so an
// hour of production traffic on 16–64 engines runs in minutes on one core.
package fleetsim

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/kvroute/kvroute/internal/mix"
)

// Record is one request of a Mooncake-format trace.
type Record struct {
	Timestamp    int64   `json:"timestamp"` // ms from the start of the trace
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
	// Priority and Tenant are kvroute-bench's additions to the format (a
	// Mooncake trace has neither): the request's priority (higher is more
	// important, as an InferenceObjective's) and its fairness key. Flow
	// control orders held requests by them; the results break down by
	// tenant.
	Priority int    `json:"priority,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
}

// Bounds on a trace line: the trace is input, checked before use.
const (
	maxLineBytes   = 4 << 20
	maxInputTokens = 1 << 20
	maxOutput      = 1 << 16
	maxPriority    = 1 << 20
	maxTenantBytes = 64
)

// TraceBlockTokens is the size of one hash id's block in Mooncake traces.
const TraceBlockTokens = 512

// ReadTrace reads a Mooncake-format JSONL trace, validating every line
// (errors name the line number, never its content).
func ReadTrace(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return DecodeTrace(f)
}

// DecodeTrace reads a Mooncake-format JSONL trace from r.
func DecodeTrace(r io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var out []Record
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("trace line %d: not a JSON record (%d bytes)", line, len(b))
		}
		if err := rec.check(); err != nil {
			return nil, fmt.Errorf("trace line %d: %w", line, err)
		}
		if n := len(out); n > 0 && rec.Timestamp < out[n-1].Timestamp {
			return nil, fmt.Errorf("trace line %d: timestamp %d before the previous %d", line, rec.Timestamp, out[n-1].Timestamp)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace line %d: %w", line+1, err)
	}
	if len(out) == 0 {
		return nil, errors.New("trace has no records")
	}
	return out, nil
}

func (r *Record) check() error {
	switch {
	case r.Timestamp < 0:
		return fmt.Errorf("negative timestamp %d", r.Timestamp)
	case r.InputLength < 1 || r.InputLength > maxInputTokens:
		return fmt.Errorf("input_length %d not within 1..%d", r.InputLength, maxInputTokens)
	case r.OutputLength < 0 || r.OutputLength > maxOutput:
		return fmt.Errorf("output_length %d not within 0..%d", r.OutputLength, maxOutput)
	case len(r.HashIDs) != (r.InputLength+TraceBlockTokens-1)/TraceBlockTokens:
		return fmt.Errorf("%d hash_ids for input_length %d (want one per %d tokens)", len(r.HashIDs), r.InputLength, TraceBlockTokens)
	case r.Priority < -maxPriority || r.Priority > maxPriority:
		return fmt.Errorf("priority not within %d..%d", -maxPriority, maxPriority)
	case len(r.Tenant) > maxTenantBytes:
		return fmt.Errorf("tenant of %d bytes (at most %d)", len(r.Tenant), maxTenantBytes)
	}
	for _, h := range r.HashIDs {
		if h < 0 {
			return fmt.Errorf("negative hash id")
		}
	}
	return nil
}

// Request is one simulated request: arrival, prompt token ids, output length.
type Request struct {
	At        time.Duration
	Tokens    []int
	MaxTokens int
	Class     Class
}

// Source yields a run's requests in arrival order; Prompt builds a
// request's tokens when it arrives, so a long trace never holds every
// prompt in memory.
type Source interface {
	Len() int
	At(i int) time.Duration
	Prompt(i int) (tokens []int, maxTokens int)
	// IdealHit is the prefix tokens of request i an infinite cache would
	// hold, given every request before it (whole blocks of blockSize
	// tokens, never the last prompt token, as vLLM).
	IdealHit(i, blockSize int) int
}

// Class is a request's priority (higher is more important) and fairness
// key (its tenant; "" is the default flow).
type Class struct {
	Priority int
	Tenant   string
}

// classedSource is a Source whose requests carry classes; a Source without
// Class puts every request in the zero Class.
type classedSource interface {
	Class(i int) Class
}

// classOf is request i's class.
func classOf(src Source, i int) Class {
	if c, ok := src.(classedSource); ok {
		return c.Class(i)
	}
	return Class{}
}

// TraceSource replays a Mooncake trace: every hash id gets its own
// deterministic 512 tokens (equal ids, equal tokens; different ids never
// the same block), a prompt is its ids' blocks cut to input_length, and
// arrival times are divided by Speedup (1 = as recorded).
type TraceSource struct {
	Records []Record
	Speedup float64
	// BlockTokens, when set, scales the trace: every hash id becomes a
	// block of this many tokens and a prompt is its ids' whole blocks
	// (input_length is then ignored), as the real-socket benchmark's trace
	// workload spells every block as a few words.
	BlockTokens int
	// MaxTokens, when set, replaces every request's output length.
	MaxTokens int
	seen      map[int64]bool
	ideal     []int
}

// Len implements Source.
func (t *TraceSource) Len() int { return len(t.Records) }

// At implements Source.
func (t *TraceSource) At(i int) time.Duration {
	s := t.Speedup
	if !(s > 0) {
		s = 1
	}
	return time.Duration(float64(t.Records[i].Timestamp) * float64(time.Millisecond) / s)
}

// Class is request i's priority and tenant, as its record gives them.
func (t *TraceSource) Class(i int) Class {
	return Class{Priority: t.Records[i].Priority, Tenant: t.Records[i].Tenant}
}

// Prompt implements Source.
func (t *TraceSource) Prompt(i int) ([]int, int) {
	r := &t.Records[i]
	maxTokens := max(r.OutputLength, 1)
	if t.MaxTokens > 0 {
		maxTokens = t.MaxTokens
	}
	if t.BlockTokens > 0 {
		out := make([]int, 0, len(r.HashIDs)*t.BlockTokens)
		for _, h := range r.HashIDs {
			out = appendBlock(out, h, t.BlockTokens)
		}
		return out, maxTokens
	}
	out := make([]int, 0, r.InputLength)
	for _, h := range r.HashIDs {
		out = appendBlock(out, h, min(TraceBlockTokens, r.InputLength-len(out)))
	}
	return out, maxTokens
}

// promptLen is request i's prompt tokens.
func (t *TraceSource) promptLen(i int) int {
	if t.BlockTokens > 0 {
		return len(t.Records[i].HashIDs) * t.BlockTokens
	}
	return t.Records[i].InputLength
}

// IdealHit implements Source: the leading run of hash ids seen in earlier
// requests, in tokens, rounded down to whole engine blocks.
func (t *TraceSource) IdealHit(i, blockSize int) int {
	if t.ideal == nil {
		t.seen = map[int64]bool{}
		t.ideal = make([]int, len(t.Records))
		for j := range t.Records {
			r := &t.Records[j]
			run := 0
			for _, h := range r.HashIDs {
				if !t.seen[h] {
					break
				}
				run++
			}
			bt := TraceBlockTokens
			if t.BlockTokens > 0 {
				bt = t.BlockTokens
			}
			t.ideal[j] = min(run*bt, t.promptLen(j))
			for _, h := range r.HashIDs {
				t.seen[h] = true
			}
		}
	}
	return min(t.ideal[i], (t.promptLen(i)-1)/blockSize*blockSize)
}

// vocab bounds synthetic token ids (a Qwen-sized vocabulary, so ids look
// like real ones to the hashers).
const vocab = 151_000

// appendBlock appends the first n of hash id h's 512 tokens: a splitmix64
// stream seeded by h.
func appendBlock(dst []int, h int64, n int) []int {
	x := uint64(h)*0x9E3779B97F4A7C15 + 0x6b76726f757465
	for range n {
		x += 0x9E3779B97F4A7C15
		dst = append(dst, int(mix.Mix64(x)%vocab))
	}
	return dst
}

// SliceSource serves requests already built (tests, the cross-check).
type SliceSource []Request

// Len implements Source.
func (s SliceSource) Len() int { return len(s) }

// At implements Source.
func (s SliceSource) At(i int) time.Duration { return s[i].At }

// Class is request i's class.
func (s SliceSource) Class(i int) Class { return s[i].Class }

// Prompt implements Source.
func (s SliceSource) Prompt(i int) ([]int, int) { return s[i].Tokens, max(s[i].MaxTokens, 1) }

// IdealHit implements Source: the longest prefix shared with any earlier
// request, in whole blocks.
func (s SliceSource) IdealHit(i, blockSize int) int {
	best := 0
	for j := 0; j < i; j++ {
		n := 0
		a, b := s[i].Tokens, s[j].Tokens
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		best = max(best, n)
	}
	return min(best/blockSize*blockSize, (len(s[i].Tokens)-1)/blockSize*blockSize)
}

// SpreadArrivals spreads each record's arrival uniformly over [timestamp,
// timestamp + window) and returns the records in the new arrival order
// (stable among equal times). Mooncake's conversation trace records time in
// 3-second buckets (12,031 requests on 1,180 distinct timestamps): replayed
// as is, each bucket is a burst of ~10 simultaneous requests, which several
// independent routers decide without seeing each other. The offsets are a
// function of seed and the record's position, so a replay is repeatable.
func SpreadArrivals(recs []Record, window time.Duration, seed uint64) []Record {
	out := slices.Clone(recs)
	ms := window.Milliseconds()
	if ms <= 1 {
		return out
	}
	for i := range out {
		x := mix.Mix64(seed + uint64(i)*0x9E3779B97F4A7C15)
		out[i].Timestamp += int64(x % uint64(ms))
	}
	slices.SortStableFunc(out, func(a, b Record) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	return out
}

// KeepTenants returns the records of the named tenants, in order.
func KeepTenants(recs []Record, tenants []string) []Record {
	var out []Record
	for _, r := range recs {
		if slices.Contains(tenants, r.Tenant) {
			out = append(out, r)
		}
	}
	return out
}
