// Command vllm-emu runs an emulated vLLM server: the OpenAI API, a paged
// prefix cache with vLLM's block hashes, KV events over ZeroMQ and vLLM's
// metrics, with time as the only emulated thing. It takes vLLM's own flags
// for everything it emulates, plus --emu-* flags for the latency model.
// See docs/EMULATOR.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/internal/vllmemu"
	"github.com/kvroute/kvroute/tokenize"
)

// errUsage is a flag error; the flag package has printed the usage.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "vllm-emu: %v\n", err)
		os.Exit(1)
	}
}

// multiFlags is a repeatable string flag.
type multiFlags []string

func (m *multiFlags) String() string     { return strings.Join(*m, " ") }
func (m *multiFlags) Set(v string) error { *m = append(*m, v); return nil }

// nargsFlags are vLLM's flags that take several values after one flag
// (argparse nargs="+"); expandNargs turns them into repeated flags.
var nargsFlags = map[string]bool{"--lora-modules": true, "-lora-modules": true, "--served-model-name": true, "-served-model-name": true}

func expandNargs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if !nargsFlags[a] {
			continue
		}
		if i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out = append(out, a, args[i+1])
			i++
		}
	}
	return out
}

// loraName reads one --lora-modules value: name=path or vLLM's JSON form
// {"name": ..., "path": ...}.
func loraName(v string) (string, error) {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		var m struct {
			Name string `json:"name"`
			Path string `json:"path"`
		}
		if err := json.Unmarshal([]byte(v), &m); err != nil || m.Name == "" {
			return "", fmt.Errorf("--lora-modules %q: want name=path or {\"name\":...,\"path\":...}", v)
		}
		return m.Name, nil
	}
	name, _, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return "", fmt.Errorf("--lora-modules %q: want name=path", v)
	}
	return name, nil
}

// run is the whole program: parse flags, build and start the engines, serve
// HTTP until ctx ends, then shut down. ready, if not nil, gets the HTTP
// address once everything listens.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("vllm-emu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		model        = fs.String("model", "", "model name (vLLM --model); required")
		tokenizerDir = fs.String("tokenizer", "", "directory with tokenizer.json and tokenizer_config.json; required")
		host         = fs.String("host", "127.0.0.1", "HTTP listen host")
		port         = fs.Int("port", 8000, "HTTP listen port (0 picks a free one)")
		blockSize    = fs.Int("block-size", 16, "tokens per KV-cache block")
		numBlocks    = fs.Int("num-gpu-blocks-override", 2048, "KV-cache capacity in blocks (block 0 is vLLM's null block)")
		hashAlgo     = fs.String("prefix-caching-hash-algo", "sha256", "sha256, sha256_cbor, xxhash or xxhash_cbor")
		maxSeqs      = fs.Int("max-num-seqs", 8, "most sequences running at once")
		maxBatched   = fs.Int("max-num-batched-tokens", 2048, "token budget of one scheduler step")
		maxModelLen  = fs.Int("max-model-len", 0, "prompt + output token limit (0: min(32768, KV capacity))")
		kvEvents     = fs.String("kv-events-config", "", `vLLM's KV events JSON, e.g. {"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558"}`)
		dpSize       = fs.Int("data-parallel-size", 1, "engines (DP ranks) in this process; rank r publishes on endpoint port + r")
		chatTemplate = fs.String("chat-template", "", "chat template file (default: chat_template.jinja beside the tokenizer, then tokenizer_config.json)")
		prefillTok   = fs.Duration("emu-prefill-per-token", 50*time.Microsecond, "modelled step time per uncached prompt token")
		decodeTok    = fs.Duration("emu-decode-per-token", 5*time.Millisecond, "modelled time of a step in which sequences decode one token each")
		legacy       = fs.Bool("emu-legacy-layout", false, "encode events as positional arrays (vLLM <= 0.23) and replay without the topic frame")
		bytesHashes  = fs.Bool("emu-bytes-block-hashes", false, "publish full digests as block hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)")
		silentEvict  = fs.Bool("emu-evict-without-events", false, "reuse cached blocks without publishing BlockRemoved (an engine a router's index cannot follow; vLLM always publishes)")
		loraModules  multiFlags
		servedNames  multiFlags
	)
	fs.Var(&loraModules, "lora-modules", "LoRA adapter name=path (repeatable, or several after one flag); lora_id = position + 1")
	fs.Var(&servedNames, "served-model-name", "name(s) the API serves the model as (default: --model); the first names responses")
	if err := fs.Parse(expandNargs(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vllm-emu: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if *model == "" || *tokenizerDir == "" {
		fmt.Fprintln(stderr, "vllm-emu: --model and --tokenizer are required")
		return errUsage
	}
	algo, err := blockhash.ParseAlgorithm(*hashAlgo)
	if err != nil || algo == blockhash.SHA256CBOR64Bit {
		return fmt.Errorf("--prefix-caching-hash-algo %q: choose from sha256, sha256_cbor, xxhash, xxhash_cbor", *hashAlgo)
	}
	events := vllmemu.KVEventsConfig{}
	if *kvEvents != "" {
		if events, err = vllmemu.ParseKVEventsConfig(*kvEvents); err != nil {
			return fmt.Errorf("--%w", err)
		}
	}
	var loras []string
	for _, v := range loraModules {
		name, err := loraName(v)
		if err != nil {
			return err
		}
		loras = append(loras, name)
	}
	served := *model
	var aliases []string
	if len(servedNames) > 0 {
		served, aliases = servedNames[0], servedNames[1:]
	}
	var seed *string
	if s, ok := os.LookupEnv("PYTHONHASHSEED"); ok {
		seed = &s
	}

	log := slog.New(slog.NewTextHandler(stdout, nil)) // vLLM logs to stdout too
	tok, err := tokenize.Load(*tokenizerDir)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	chat, err := vllmemu.LoadChatTemplates(tok, *tokenizerDir, *chatTemplate)
	if err != nil {
		return err
	}
	if chat == nil {
		log.Warn("vllm-emu: no chat template; /v1/chat/completions answers 400")
	}
	engines, err := vllmemu.NewDataParallel(vllmemu.Options{
		Model: served, ModelAliases: aliases, LoRAAdapters: loras, Tokenizer: tok, Chat: chat,
		BlockSize: *blockSize, NumBlocks: *numBlocks, HashAlgo: algo, Seed: seed, BytesBlockHashes: *bytesHashes, EvictWithoutEvents: *silentEvict,
		MaxNumSeqs: *maxSeqs, MaxNumBatchedTokens: *maxBatched, MaxModelLen: *maxModelLen,
		PrefillPerToken: *prefillTok, DecodePerToken: *decodeTok, LegacyLayout: *legacy, Logger: log,
	}, *dpSize, events)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := vllmemu.StartAll(ctx, engines); err != nil {
		ln.Close()
		return err
	}
	handler := engines[0].Handler()
	if len(engines) > 1 {
		handler = vllmemu.DPHandler(engines)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()

	var eps, replays []string
	for _, e := range engines {
		if ep := e.EventsEndpoint(); ep != "" {
			eps = append(eps, ep)
		}
		if ep := e.ReplayEndpoint(); ep != "" {
			replays = append(replays, ep)
		}
	}
	addr := ln.Addr().String()
	log.Info("vllm-emu: serving", "http", addr, "model", served, "data_parallel_size", len(engines),
		"events", strings.Join(eps, ","), "replay", strings.Join(replays, ","),
		"block_size", *blockSize, "num_gpu_blocks", *numBlocks, "hash_algo", algo.String(), "pythonhashseed_set", seed != nil)
	if ready != nil {
		ready(addr)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-serveDone:
	}
	// Stop accepting, end the requests in flight (their engines close), then
	// wait for the HTTP handlers to return.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(shutdownCtx) }()
	closeErr := vllmemu.CloseAll(engines)
	shutErr := <-shut
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	if err := errors.Join(closeErr, shutErr); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("vllm-emu: stopped")
	return nil
}
