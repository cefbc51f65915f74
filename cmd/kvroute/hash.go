package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kvroute/kvroute/blockhash"
)

// runHash prints the block keys of a JSON array of token ids read on stdin:
// `<digest hex> <64-bit event value>` per full block for engine keys, or
// `- <key>` for kvroute's own token keys.
func runHash(_ context.Context, args []string, std stdio) error {
	fs := flag.NewFlagSet("hash", flag.ContinueOnError)
	fs.SetOutput(std.err)
	algo := fs.String("algo", "sha256", "vLLM --prefix-caching-hash-algo: sha256, sha256_cbor, xxhash, xxhash_cbor, sha256_cbor_64bit")
	seed := fs.String("seed", "", "the engines' PYTHONHASHSEED (required for engine keys)")
	blockSize := fs.Int("block-size", 16, "vLLM --block-size in tokens")
	lora := fs.String("lora-name", "", "LoRA adapter name (enters every block)")
	salt := fs.String("cache-salt", "", "request cache_salt (enters block 0)")
	keys := fs.String("keys", "engine", "engine: vLLM's hashes; tokens: kvroute's chained keys")
	poolSeed := fs.String("pool", "", "pool name seeding token keys (--keys tokens)")
	fs.Usage = func() {
		fmt.Fprintln(std.err, "usage: kvroute hash --algo ALGO --seed SEED --block-size N [--lora-name S] [--cache-salt S] [--keys engine|tokens] < tokens.json")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	seedSet := false
	fs.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "seed" })

	var tokens []uint64
	dec := json.NewDecoder(std.in)
	if err := dec.Decode(&tokens); err != nil {
		return fmt.Errorf("stdin: want a JSON array of non-negative token ids: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("stdin: unexpected data after the token array")
	}
	rk := blockhash.RequestKeys{LoRAName: *lora, CacheSalt: *salt}
	out := bufio.NewWriter(std.out)
	defer out.Flush()

	switch *keys {
	case "tokens":
		k, err := blockhash.NewTokenKeyer(*poolSeed, *blockSize)
		if err != nil {
			return err
		}
		ks, err := blockhash.AppendKeys(k, nil, k.Root(), tokens, rk)
		if err != nil {
			return err
		}
		for _, key := range ks {
			fmt.Fprintf(out, "- %d\n", key)
		}
	case "engine":
		a, err := blockhash.ParseAlgorithm(*algo)
		if err != nil {
			return err
		}
		var s *string
		if seedSet {
			s = seed
		}
		e, err := blockhash.NewEngine(a, s, *blockSize)
		if err != nil {
			return err
		}
		ds, err := blockhash.AppendDigests(e, nil, tokens, rk)
		if err != nil {
			return err
		}
		for _, d := range ds {
			fmt.Fprintf(out, "%s %d\n", d.Hex(), d.EventValue())
		}
	default:
		return fmt.Errorf("--keys %q: want engine or tokens", *keys)
	}
	return nil
}
