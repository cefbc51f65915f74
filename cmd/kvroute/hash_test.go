package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// TestHashCommandReproducesVectors runs `kvroute hash` on every vector whose
// extra keys the CLI can express (LoRA, cache_salt) and compares its lines
// with vLLM's digests and event values.
func TestHashCommandReproducesVectors(t *testing.T) {
	v := testdata.LoadBlockHashVectors(t)
	checked := 0
	for _, c := range v.Vectors {
		if c.Inputs.Embeds != nil || string(c.Inputs.MMFeatures) != "[]" {
			continue
		}
		args := []string{"hash", "--algo", c.Algo, "--seed", c.Seed, "--block-size", fmt.Sprint(c.BlockSize)}
		if c.Inputs.LoRAName != nil {
			args = append(args, "--lora-name", *c.Inputs.LoRAName)
		}
		if c.Inputs.CacheSalt != nil {
			args = append(args, "--cache-salt", *c.Inputs.CacheSalt)
		}
		in, _ := json.Marshal(c.Inputs.TokenIDs)
		var out, errw bytes.Buffer
		if code := run(context.Background(), args, stdio{bytes.NewReader(in), &out, &errw}); code != 0 {
			t.Fatalf("%s/%s: exit %d: %s", c.Case, c.Algo, code, errw.String())
		}
		var want strings.Builder
		for _, b := range c.Blocks {
			fmt.Fprintf(&want, "%s %d\n", b.DigestHex, b.EventU64)
		}
		if out.String() != want.String() {
			t.Errorf("%s/%s B%d:\n got %s\nwant %s", c.Case, c.Algo, c.BlockSize, out.String(), want.String())
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("only %d vectors checked", checked)
	}
}

func TestHashCommandRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		in   string
		want string
	}{
		{[]string{"hash", "--seed", "0"}, "[1, 2, -3]", "JSON array"},
		{[]string{"hash", "--seed", "0"}, "not json", "JSON array"},
		{[]string{"hash", "--seed", "0"}, "[1] [2]", "after the token array"},
		{[]string{"hash"}, "[1]", "PYTHONHASHSEED"},
		{[]string{"hash", "--seed", "0", "--algo", "md5"}, "[1]", "unknown hash algorithm"},
		{[]string{"hash", "--seed", "0", "--block-size", "0"}, "[1]", "block size"},
	} {
		var out, errw bytes.Buffer
		code := run(context.Background(), tc.args, stdio{strings.NewReader(tc.in), &out, &errw})
		if code != 1 || !strings.Contains(errw.String(), tc.want) {
			t.Errorf("%v < %q: exit %d, stderr %q (want exit 1 mentioning %q)", tc.args, tc.in, code, errw.String(), tc.want)
		}
	}
}

func TestHashCommandTokenKeys(t *testing.T) {
	var out, errw bytes.Buffer
	code := run(context.Background(), []string{"hash", "--keys", "tokens", "--pool", "qwen3", "--block-size", "4", "--cache-salt", "tenant-a"},
		stdio{strings.NewReader("[1, 2, 23, 24, 255, 256, 65535, 65536, 9]"), &out, &errw})
	// The values pinned by blockhash.TestTokenKeysAreStable.
	if want := fmt.Sprintf("- %d\n- %d\n", uint64(0x4439e36e8342d7b7), uint64(0xd36c2756c3bf3357)); code != 0 || out.String() != want {
		t.Fatalf("exit %d, out %q, stderr %q; want %q", code, out.String(), errw.String(), want)
	}
}
