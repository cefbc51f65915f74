package routebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/tokenize"
)

// EmuFleetOptions configure an in-process fleet of emulated vLLM engines.
type EmuFleetOptions struct {
	Replicas  int
	Model     string
	Tokenizer *tokenize.Tokenizer
	// Chat renders chat requests (the model's template); nil: no chat.
	Chat      *chattemplate.ChatTemplates
	BlockSize int
	NumBlocks int // per replica
	// HashAlgo is --prefix-caching-hash-algo; Seed is PYTHONHASHSEED, shared
	// by the whole fleet as in a real deployment (kvroute's engine keys need it).
	HashAlgo        blockhash.Algorithm
	Seed            string
	MaxNumSeqs      int
	PrefillPerToken time.Duration
	DecodePerToken  time.Duration
	LoRAAdapters    []string
	// Spare replicas get addresses (HTTP, events, replay) but stay down until
	// Start: an engine that joins later, configured in kvroute from the start.
	Spare  int
	Logger *slog.Logger // nil → discarded
}

// engineOptions are the options of replica rp's engine.
func (o EmuFleetOptions) engineOptions(rp Replica, log *slog.Logger) vllmemu.Options {
	seed := o.Seed
	return vllmemu.Options{
		Model: o.Model, Tokenizer: o.Tokenizer, Chat: o.Chat, BlockSize: o.BlockSize, NumBlocks: o.NumBlocks,
		HashAlgo: o.HashAlgo, Seed: &seed, MaxNumSeqs: o.MaxNumSeqs, LoRAAdapters: o.LoRAAdapters,
		PrefillPerToken: o.PrefillPerToken, DecodePerToken: o.DecodePerToken,
		EventsEndpoint: rp.Events, ReplayEndpoint: rp.Replay, Logger: log,
	}
}

// TimeModel is the latency model of the fleet's engines.
func (o EmuFleetOptions) TimeModel() vllmemu.TimeModel {
	return o.engineOptions(Replica{}, nil).TimeModel()
}

// EmuFleet is N vllmemu engines, each behind its own loopback HTTP server
// and publishing KV events on loopback ZeroMQ sockets. Unlike child
// processes it lets the greedy policy ask each engine's real prefix cache,
// and an engine can be restarted (cache gone, same addresses) or joined.
type EmuFleet struct {
	HTTP     *HTTPFleet
	Replicas []Replica
	// Arrivals records every request that reaches an engine.
	Arrivals *ArrivalLog

	o   EmuFleetOptions
	log *slog.Logger

	mu      sync.Mutex
	engines []*vllmemu.Engine // nil while down
	stops   []func()          // per replica; nil while down
}

// StartEmuFleet starts Replicas engines and reserves Spare more; Close stops
// them.
func StartEmuFleet(ctx context.Context, o EmuFleetOptions) (*EmuFleet, error) {
	if o.Tokenizer == nil || o.Replicas <= 0 || o.Spare < 0 {
		return nil, errors.New("routebench: fleet needs a tokenizer and at least one replica")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n := o.Replicas + o.Spare
	f := &EmuFleet{HTTP: &HTTPFleet{Client: &http.Client{Timeout: 30 * time.Second}}, Arrivals: &ArrivalLog{},
		o: o, log: log, engines: make([]*vllmemu.Engine, n), stops: make([]func(), n)}
	for i := range n {
		// Three loopback ports per replica, held by the first start and
		// reused by every restart.
		var ports [3]int
		for k := range ports {
			p, err := FreePort()
			if err != nil {
				f.Close()
				return nil, err
			}
			ports[k] = p
		}
		name := fmt.Sprintf("vllm-%d", i)
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		f.HTTP.Names = append(f.HTTP.Names, name)
		f.HTTP.Addrs = append(f.HTTP.Addrs, addr)
		f.Replicas = append(f.Replicas, Replica{Name: name, Address: addr,
			Events: "tcp://127.0.0.1:" + strconv.Itoa(ports[1]), Replay: "tcp://127.0.0.1:" + strconv.Itoa(ports[2])})
		if i < o.Replicas {
			if err := f.Start(ctx, i); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	return f, nil
}

// Up is the number of replicas always started (Replicas); Len counts spares.
func (f *EmuFleet) Len() int { return len(f.Replicas) }

// IsUp reports whether replica i is running.
func (f *EmuFleet) IsUp(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engines[i] != nil
}

// Engine returns replica i's engine, nil while it is down.
func (f *EmuFleet) Engine(i int) *vllmemu.Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engines[i]
}

// Start starts replica i on its addresses with an empty cache (a fresh
// engine: counters and event sequence numbers start from zero).
func (f *EmuFleet) Start(ctx context.Context, i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.engines[i] != nil {
		return nil
	}
	rp := f.Replicas[i]
	e, err := vllmemu.New(f.o.engineOptions(rp, f.log))
	if err != nil {
		return err
	}
	if err := e.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("%s: %w", rp.Name, err)
	}
	stop, err := serveAt(rp.Address, f.Arrivals.wrap(rp.Name, e.Handler()))
	if err != nil {
		e.Close()
		return fmt.Errorf("%s: %w", rp.Name, err)
	}
	f.engines[i] = e
	// The engine first, so its requests in flight fail at once, as a killed
	// engine's connections do.
	f.stops[i] = func() { e.Close(); stop() }
	return nil
}

// Stop stops replica i (its cache is gone; Start brings it back empty).
func (f *EmuFleet) Stop(i int) {
	f.mu.Lock()
	stop := f.stops[i]
	f.stops[i], f.engines[i] = nil, nil
	f.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// Restart stops replica i and starts it again on the same addresses.
func (f *EmuFleet) Restart(ctx context.Context, i int) error {
	f.Stop(i)
	return f.Start(ctx, i)
}

// Close stops every replica, last first.
func (f *EmuFleet) Close() {
	for i := len(f.stops) - 1; i >= 0; i-- {
		f.Stop(i)
	}
}

// UpFleet is the HTTP view of the replicas now running (for resets, idle
// waits and counters), and their indexes in the fleet.
func (f *EmuFleet) UpFleet() (*HTTPFleet, []int) {
	out := &HTTPFleet{Client: f.HTTP.Client}
	var idx []int
	for i := range f.Replicas {
		if f.IsUp(i) {
			out.Names = append(out.Names, f.HTTP.Names[i])
			out.Addrs = append(out.Addrs, f.HTTP.Addrs[i])
			idx = append(idx, i)
		}
	}
	return out, idx
}

// Greedy returns the greedy cache-aware policy over this fleet: it tokenizes
// each request as the engines do (completions add special tokens; chat is
// rendered with the model's template) and asks every engine how much of it
// its prefix cache holds right now.
func (f *EmuFleet) Greedy(loadWeight float64) *GreedyCacheAware {
	return &GreedyCacheAware{
		Encode: func(r PickRequest) []int { ids, _ := EncodeRequest(f.o.Tokenizer, f.o.Chat, r); return ids },
		CachedTokens: func(i int, ids []int, model, salt string) int {
			e := f.Engine(i)
			if e == nil || len(ids) == 0 {
				return 0
			}
			// The base model's name is no adapter: only an adapter's name
			// enters the block hashes.
			lora := ""
			if slices.Contains(f.o.LoRAAdapters, model) {
				lora = model
			}
			return e.CachedPrefixBlocks(ids, lora, salt) * e.Options().BlockSize
		},
		Queue: func(i int) int {
			e := f.Engine(i)
			if e == nil {
				return 0
			}
			s := e.Stats()
			return s.Running + s.Waiting
		},
		LoadWeight: loadWeight,
	}
}

// EncodeRequest returns a request's prompt token ids as a vLLM engine
// computes them: completions text with special tokens, chat messages
// rendered with the chat template and encoded without them unless asked.
func EncodeRequest(tok *tokenize.Tokenizer, chat *chattemplate.ChatTemplates, r PickRequest) ([]int, error) {
	if r.Messages == nil {
		return tok.Encode(r.Prompt, true), nil
	}
	if chat == nil {
		return nil, errors.New("routebench: chat request but no chat template")
	}
	req, err := chattemplate.ParseChatRequest(r.Body)
	if err != nil {
		return nil, err
	}
	text, err := chat.RenderRequest(req)
	if err != nil {
		return nil, err
	}
	return tok.Encode(text, req.AddSpecialTokens), nil
}

// serveAt serves h on addr (a port this process reserved earlier).
func serveAt(addr string, h http.Handler) (func(), error) {
	var ln net.Listener
	var err error
	// The previous server on this port may still be closing.
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	return serveListener(ln, h), nil
}

// Arrival is one request as it reached an engine.
type Arrival struct {
	Replica string
	At      time.Time
	ID      string // the client's x-bench-id
	// Matched is kvroute's x-kvroute-matched-tokens (debug header; -1: absent).
	Matched int
}

// ArrivalLog records requests at the engines' HTTP servers: which replica
// served which client request, and what kvroute believed it held.
type ArrivalLog struct {
	mu   sync.Mutex
	list []Arrival
}

func (l *ArrivalLog) wrap(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/") {
			a := Arrival{Replica: name, At: time.Now(), ID: r.Header.Get(headerBenchID), Matched: -1}
			if m, err := strconv.Atoi(r.Header.Get("x-kvroute-matched-tokens")); err == nil {
				a.Matched = m
			}
			l.mu.Lock()
			l.list = append(l.list, a)
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// Take returns and forgets the arrivals recorded so far.
func (l *ArrivalLog) Take() []Arrival {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.list
	l.list = nil
	return out
}

// headerBenchID carries the request's number from the client to the engines
// (the gateways pass it through).
const headerBenchID = "x-bench-id"
