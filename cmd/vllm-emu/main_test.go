package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/ingest/vllmevent"
	"github.com/kvroute/kvroute/internal/logbuf"
	"github.com/kvroute/kvroute/internal/testdata"
)

// startRun runs the program in-process and returns its HTTP address, its
// log and a stop function that cancels it and returns run's error.
func startRun(t *testing.T, args ...string) (addr string, logs *logbuf.Buffer, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &logbuf.Buffer{}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, logs, logs, func(a string) { ready <- a }) }()
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run returned before ready: %v\n%s", err, logs)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatalf("not ready after 20s:\n%s", logs)
	}
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				runErr = errors.New("run did not return 20s after cancel")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return addr, logs, stop
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, url, body string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var eventsRE = regexp.MustCompile(`events=(tcp://[0-9.]+:[0-9]+(?:,tcp://[0-9.]+:[0-9]+)*)`)

func TestRunServesEmulatedVLLM(t *testing.T) {
	t.Setenv("PYTHONHASHSEED", "0")
	addr, logs, stop := startRun(t,
		"--model", "Qwen/Qwen3-8B", "--tokenizer", testdata.TokenizerDir(t, "qwen3"), "--port", "0",
		"--num-gpu-blocks-override", "64", "--max-num-seqs", "4",
		"--kv-events-config", `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0","topic":"kv","buffer_steps":100}`,
		"--lora-modules", "sql-lora=/adapters/sql", "chat-lora=/adapters/chat",
		"--served-model-name", "qwen3", "Qwen/Qwen3-8B",
		"--emu-prefill-per-token", "1us", "--emu-decode-per-token", "1us")
	base := "http://" + addr
	m := eventsRE.FindStringSubmatch(logs.String())
	if !strings.Contains(logs.String(), "vllm-emu: serving") || m == nil {
		t.Fatalf("no serving line with the events endpoint:\n%s", logs)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(m[1]); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv"); err != nil {
		t.Fatal(err)
	}

	if code, _ := get(t, base+"/health"); code != http.StatusOK {
		t.Fatalf("health %d", code)
	}
	if code, body := get(t, base+"/v1/models"); code != 200 || !strings.Contains(body, `"id":"qwen3"`) || !strings.Contains(body, `"id":"chat-lora"`) {
		t.Fatalf("models %d %s", code, body)
	}
	msgs := make(chan zmq4.Msg, 100)
	go func() {
		defer close(msgs)
		for {
			msg, err := sub.Recv()
			if err != nil {
				return
			}
			msgs <- msg
		}
	}()
	ids := make([]int, 32)
	for i := range ids {
		ids[i] = 1000 + i
	}
	prompt, _ := json.Marshal(ids)
	// PUB drops what is sent before the subscription reaches it: retry the
	// request, resetting the cache so each try stores the blocks again. The
	// request names the alias; the response names the first served name.
	var payload []byte
	for try := 0; payload == nil; try++ {
		if try == 50 {
			t.Fatal("no BlockStored batch received")
		}
		if code, body := post(t, base+"/reset_prefix_cache", ""); code != 200 || !strings.Contains(body, `"success":true`) {
			t.Fatalf("reset %d %s", code, body)
		}
		code, body := post(t, base+"/v1/completions", `{"model":"Qwen/Qwen3-8B","prompt":`+string(prompt)+`,"max_tokens":2}`)
		if code != 200 || !strings.Contains(body, `"model":"qwen3"`) {
			t.Fatalf("completion %d %s", code, body)
		}
		deadline := time.After(200 * time.Millisecond)
	wait:
		for {
			select {
			case msg := <-msgs:
				if len(msg.Frames) != 3 || string(msg.Frames[0]) != "kv" || len(msg.Frames[1]) != 8 {
					t.Fatalf("frames %q are not [topic, seq, payload]", msg.Frames)
				}
				b, err := vllmevent.DecodeBatch(msg.Frames[2])
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if n := len(b.Events); n > 0 && b.Events[n-1].Type == vllmevent.EventBlockStored {
					payload = msg.Frames[2]
					break wait
				}
			case <-deadline:
				break wait
			}
		}
	}
	// PYTHONHASHSEED=0 and sha256 give vLLM's hashes for these blocks.
	he, err := blockhash.NewEngine(blockhash.SHA256, ptr("0"), 16)
	if err != nil {
		t.Fatal(err)
	}
	digests, err := blockhash.AppendDigests(he, nil, ids, blockhash.RequestKeys{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := vllmevent.DecodeBatch(payload)
	ev := b.Events[len(b.Events)-1]
	var got, want []uint64
	for _, h := range ev.BlockHashes {
		got = append(got, h.Value)
	}
	for _, d := range digests {
		want = append(want, d.EventValue())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("BlockStored hashes %v, want vLLM's %v", got, want)
	}

	code, metrics := get(t, base+"/metrics")
	for _, w := range []string{`vllm:cache_config_info{`, `block_size="16"`, `prefix_caching_hash_algo="sha256"`,
		`vllm:num_requests_running{engine="0",model_name="qwen3"}`, `vllm:prefix_cache_queries_total`} {
		if code != 200 || !strings.Contains(metrics, w) {
			t.Fatalf("/metrics lacks %s", w)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("run after cancel: %v", err)
	}
	if _, err := http.Get(base + "/health"); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}

func TestRunDataParallelRanks(t *testing.T) {
	addr, logs, stop := startRun(t,
		"--model", "m", "--tokenizer", testdata.TokenizerDir(t, "qwen3"), "--port", "0",
		"--data-parallel-size", "2", "--num-gpu-blocks-override", "64",
		"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0"}`,
		"--emu-prefill-per-token", "1us", "--emu-decode-per-token", "1us")
	m := eventsRE.FindStringSubmatch(logs.String())
	if m == nil || len(strings.Split(m[1], ",")) != 2 {
		t.Fatalf("want two events endpoints in:\n%s", logs)
	}
	base := "http://" + addr
	if code, body := post(t, base+"/v1/completions", `{"prompt":"hi","max_tokens":1}`, "X-data-parallel-rank", "1"); code != 200 {
		t.Fatalf("rank 1: %d %s", code, body)
	}
	if code, _ := post(t, base+"/v1/completions", `{"prompt":"hi","max_tokens":1}`, "X-data-parallel-rank", "5"); code != 400 {
		t.Fatalf("rank 5 of 2: status %d, want 400", code)
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, `vllm:prefix_cache_queries_total{engine="1",model_name="m"} 1`) {
		t.Fatalf("rank 1 did not serve the request:\n%s", metrics)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestRunFlagErrors(t *testing.T) {
	tok := testdata.TokenizerDir(t, "qwen3")
	tests := []struct {
		name string
		args []string
		want string // in the error; "" = errUsage
	}{
		{"missing model", []string{"--tokenizer", tok}, ""},
		{"unknown flag", []string{"--model", "m", "--tokenizer", tok, "--nope"}, ""},
		{"bad kv-events JSON", []string{"--model", "m", "--tokenizer", tok, "--kv-events-config", `{"enable_kv_cache_events":tru`}, "--kv-events-config"},
		{"unknown kv-events key", []string{"--model", "m", "--tokenizer", tok, "--kv-events-config", `{"enable_kv_cache_events":true,"endpont":"x"}`}, "endpont"},
		{"bad publisher", []string{"--model", "m", "--tokenizer", tok, "--kv-events-config", `{"publisher":"kafka"}`}, "publisher"},
		{"unknown hash algo", []string{"--model", "m", "--tokenizer", tok, "--prefix-caching-hash-algo", "md5"}, "--prefix-caching-hash-algo"},
		{"removed hash algo", []string{"--model", "m", "--tokenizer", tok, "--prefix-caching-hash-algo", "sha256_cbor_64bit"}, "choose from"},
		{"bad lora module", []string{"--model", "m", "--tokenizer", tok, "--lora-modules", "nopath"}, "--lora-modules"},
		{"missing tokenizer dir", []string{"--model", "m", "--tokenizer", t.TempDir()}, "--tokenizer"},
		{"max model len over capacity", []string{"--model", "m", "--tokenizer", tok, "--num-gpu-blocks-override", "4", "--max-model-len", "4096"}, "max model len"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tc.args, &out, &out, nil)
			switch {
			case tc.want == "" && !errors.Is(err, errUsage):
				t.Fatalf("err %v, want errUsage", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestExpandNargs(t *testing.T) {
	got := expandNargs([]string{"--lora-modules", "a=1", "b=2", "--port", "0", "--served-model-name", "x", "y"})
	want := []string{"--lora-modules", "a=1", "--lora-modules", "b=2", "--port", "0", "--served-model-name", "x", "--served-model-name", "y"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func ptr[T any](v T) *T { return &v }
