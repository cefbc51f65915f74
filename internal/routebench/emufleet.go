package routebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/tokenize"
)

// EmuFleetOptions configure an in-process fleet of emulated vLLM engines.
type EmuFleetOptions struct {
	Replicas  int
	Model     string
	Tokenizer *tokenize.Tokenizer
	BlockSize int
	NumBlocks int // per replica
	// HashAlgo is --prefix-caching-hash-algo; Seed is PYTHONHASHSEED, shared
	// by the whole fleet as in a real deployment (kvroute's engine keys need it).
	HashAlgo        blockhash.Algorithm
	Seed            string
	MaxNumSeqs      int
	PrefillPerToken time.Duration
	DecodePerToken  time.Duration
	Logger          *slog.Logger // nil → discarded
}

// EmuFleet is N vllmemu engines, each behind its own loopback HTTP server
// and publishing KV events on loopback ZeroMQ sockets. Unlike child
// processes it lets the oracle ask each engine's real prefix cache.
type EmuFleet struct {
	HTTP     *HTTPFleet
	Engines  []*vllmemu.Engine
	Replicas []Replica

	tok   *tokenize.Tokenizer
	stops []func()
}

// StartEmuFleet starts the engines; Close stops them.
func StartEmuFleet(ctx context.Context, o EmuFleetOptions) (*EmuFleet, error) {
	if o.Tokenizer == nil || o.Replicas <= 0 {
		return nil, errors.New("routebench: fleet needs a tokenizer and at least one replica")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	f := &EmuFleet{HTTP: &HTTPFleet{Client: &http.Client{Timeout: 30 * time.Second}}, tok: o.Tokenizer}
	for i := range o.Replicas {
		seed := o.Seed
		e, err := vllmemu.New(vllmemu.Options{
			Model: o.Model, Tokenizer: o.Tokenizer, BlockSize: o.BlockSize, NumBlocks: o.NumBlocks,
			HashAlgo: o.HashAlgo, Seed: &seed, MaxNumSeqs: o.MaxNumSeqs,
			PrefillPerToken: o.PrefillPerToken, DecodePerToken: o.DecodePerToken,
			EventsEndpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Logger: log,
		})
		if err != nil {
			f.Close()
			return nil, err
		}
		if err := e.Start(ctx); err != nil {
			f.Close()
			return nil, err
		}
		f.stops = append(f.stops, func() { e.Close() })
		url, stop, err := ServeLoopback(e.Handler())
		if err != nil {
			f.Close()
			return nil, err
		}
		f.stops = append(f.stops, stop)
		name := fmt.Sprintf("vllm-%d", i)
		addr := strings.TrimPrefix(url, "http://")
		f.Engines = append(f.Engines, e)
		f.HTTP.Names = append(f.HTTP.Names, name)
		f.HTTP.Addrs = append(f.HTTP.Addrs, addr)
		f.Replicas = append(f.Replicas, Replica{Name: name, Address: addr, Events: e.EventsEndpoint(), Replay: e.ReplayEndpoint()})
	}
	return f, nil
}

// Close stops the HTTP servers and engines, last started first.
func (f *EmuFleet) Close() {
	for i := len(f.stops) - 1; i >= 0; i-- {
		f.stops[i]()
	}
	f.stops = nil
}

// Oracle returns the oracle policy over this fleet: it tokenizes each prompt
// as the engines do (completions add special tokens) and asks every engine
// how much of it its prefix cache holds right now.
func (f *EmuFleet) Oracle(loadWeight float64) *Oracle {
	return &Oracle{
		Encode: func(prompt string) []int { return f.tok.Encode(prompt, true) },
		CachedTokens: func(i int, ids []int) int {
			e := f.Engines[i]
			return e.CachedPrefixBlocks(ids, "", "") * e.Options().BlockSize
		},
		Queue: func(i int) int {
			s := f.Engines[i].Stats()
			return s.Running + s.Waiting
		},
		LoadWeight: loadWeight,
	}
}
