package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const minimal = `
pools:
  - name: qwen3
    models: ["Qwen/Qwen3-8B"]
    replicas:
      - {name: vllm-0, address: 10.0.0.7:8000, events: "tcp://10.0.0.7:5557"}
`

func TestExampleConfigValidates(t *testing.T) {
	c, err := Load(filepath.Join("..", "examples", "kvroute.yaml"))
	if err != nil {
		t.Fatalf("examples/kvroute.yaml: %v", err)
	}
	if len(c.Pools) != 1 || len(c.Pools[0].Replicas) != 2 {
		t.Fatalf("unexpected example shape: %+v", c.Pools)
	}
}

func TestDefaultsAreAppliedOnce(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Pools[0].Replicas[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen.extproc", c.Listen.ExtProc, ":9002"},
		{"listen.admin", c.Listen.Admin, "127.0.0.1:9090"},
		{"index.ttl", c.Index.TTL.Std(), 10 * time.Minute},
		{"index.max_entries", c.Index.MaxEntries, 20_000_000},
		{"index.cpu_tier_weight", c.Index.CPUTierWeight, 0.5},
		{"index.speculative_ttl", c.Index.SpeculativeTTL.Std(), 2 * time.Second},
		{"routing.prefill_tokens_per_second", c.Routing.PrefillTokensPerSecond, 10000.0},
		{"routing.kv_full_penalty", c.Routing.KVFullPenalty.Std(), 500 * time.Millisecond},
		{"routing.placement_slack", c.Routing.PlacementSlack, 0.2},
		{"routing.fail_open", c.Routing.FailOpenEnabled(), true},
		{"routing.flow_control.enabled", c.Routing.FlowControl.Enabled, false},
		{"routing.flow_control.shed_status", c.Routing.FlowControl.ShedStatus, 429},
		{"routing.flow_control.max_ttl", c.Routing.FlowControl.MaxTTL(), 10 * time.Second},
		{"routing.body_limit_bytes", c.Routing.BodyLimitBytes, 8 << 20},
		{"routing.body_mode", c.Routing.BodyMode, BodyModeBuffered},
		{"routing.max_prompt_bytes", c.Routing.MaxPromptBytes, 1 << 20},
		{"routing.max_prompt_tokens", c.Routing.MaxPromptTokens, 256 << 10},
		{"routing.max_messages", c.Routing.MaxMessages, 4096},
		{"routing.max_decide_bytes_in_flight", c.Routing.MaxDecideBytesInFlight, 8 << 20},
		{"ingest.scrape_interval", c.Ingest.ScrapeInterval.Std(), time.Second},
		{"ingest.max_message_bytes", c.Ingest.MaxMessageBytes, 32 << 20},
		{"pools[0].keys", c.Pools[0].Keys, KeysTokens},
		{"pools[0].hash.algorithm", c.Pools[0].Hash.Algorithm, "sha256"},
		{"replica.metrics", r.Metrics, "http://10.0.0.7:8000/metrics"},
		{"replica.data_parallel_size", r.DataParallelSize, 1},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestExplicitZeroesAreKept(t *testing.T) {
	c, err := Parse([]byte(`
listen: {admin: ""}
index: {cpu_tier_weight: 0, speculative_ttl: 0}
routing: {fail_open: false, placement_slack: 0}
ingest: {scrape_interval: 0}
` + minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen.Admin != "" || c.Index.CPUTierWeight != 0 || c.Index.SpeculativeTTL != 0 || c.Routing.PlacementSlack != 0 ||
		c.Routing.FailOpenEnabled() || c.Ingest.ScrapeInterval != 0 {
		t.Fatalf("explicit zero values were overwritten: %+v", c)
	}
}

func TestErrorsNameTheKeyAndValue(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", "lisen: {}\n" + minimal, `lisen: unknown key`},
		{"removed load_weight", "routing: {load_weight: 1}\n" + minimal, `routing.load_weight: unknown key`},
		{"removed decode_interference", "routing: {decode_interference: 10ms}\n" + minimal, `routing.decode_interference: unknown key`},
		{"removed foreign_running_share", "routing: {foreign_running_share: 0.5}\n" + minimal, `routing.foreign_running_share: unknown key`},
		{"removed body_mode auto", "routing: {body_mode: auto}\n" + minimal, `routing.body_mode: "auto" is not one of buffered, full_duplex`},
		{"unknown nested key", minimal + "    blok_size: 16\n", `pools[0].blok_size: unknown key`},
		{"unknown replica key", strings.Replace(minimal, "name: vllm-0", "nmae: vllm-0", 1), `pools[0].replicas[0].nmae: unknown key`},
		{"wrong type int", minimal + "    block_size: sixteen\n", `pools[0].block_size: "sixteen" is not a whole number`},
		{"wrong type list", strings.Replace(minimal, `models: ["Qwen/Qwen3-8B"]`, `models: Qwen`, 1), `pools[0].models: want a list, got "Qwen"`},
		{"bad duration", "index: {ttl: soon}\n" + minimal, `index.ttl: "soon" is not a duration`},
		{"address not ip:port", strings.Replace(minimal, "10.0.0.7:8000", "vllm-0", 1), `pools[0].replicas[0].address: "vllm-0" is not ip:port`},
		{"address hostname", strings.Replace(minimal, "10.0.0.7:8000", "vllm.local:8000", 1), `pools[0].replicas[0].address: "vllm.local:8000" is not ip:port`},
		{"bad zmq scheme", strings.Replace(minimal, "tcp://10.0.0.7:5557", "http://10.0.0.7:5557", 1), `pools[0].replicas[0].events: "http://10.0.0.7:5557" has scheme "http"`},
		{"zmq wildcard", strings.Replace(minimal, "tcp://10.0.0.7:5557", "tcp://*:5557", 1), `pools[0].replicas[0].events: "tcp://*:5557" is the engine's bind address`},
		{"zmq no port", strings.Replace(minimal, "tcp://10.0.0.7:5557", "tcp://10.0.0.7", 1), `pools[0].replicas[0].events: "tcp://10.0.0.7" is not tcp://host:port`},
		{"unknown algorithm", minimal + "    hash: {algorithm: md5}\n", `pools[0].hash.algorithm: "md5" is not one of sha256, sha256_cbor, xxhash, xxhash_cbor, sha256_cbor_64bit`},
		{"engine keys need seed", minimal + "    keys: engine\n", `pools[0].hash.seed: is required for keys: engine`},
		{"bad keys", minimal + "    keys: blocks\n", `pools[0].keys: "blocks" is not one of tokens, engine`},
		{"duplicate replica", minimal + "      - {name: vllm-0, address: 10.0.0.8:8000}\n", `pools[0].replicas[1].name: "vllm-0" is already the name of replicas[0]`},
		{"duplicate address", minimal + "      - {name: vllm-1, address: 10.0.0.7:8000}\n", `pools[0].replicas[1].address: "10.0.0.7:8000" is already the address of replicas[0]`},
		{"duplicate key", "log: {level: info, level: debug}\n" + minimal, `log.level: duplicate key`},
		{"bad log level", "log: {level: loud}\n" + minimal, `log.level: "loud" is not one of debug, info, warn, error`},
		{"no pools", "listen: {extproc: \":9002\"}\n", `pools: at least one pool is needed`},
		{"bad listen", "listen: {extproc: \"9002\"}\n" + minimal, `listen.extproc: "9002" is not host:port`},
		{"message cap range", "ingest: {max_message_bytes: 2147483648}\n" + minimal, `ingest.max_message_bytes: 2147483648 must be in (0, 1073741824]`},
		{"ceiling range", "routing: {kv_usage_ceiling: 1.5}\n" + minimal, `routing.kv_usage_ceiling: 1.5 is not within (0, 1]`},
		{"metrics url", strings.Replace(minimal, `events: "tcp://10.0.0.7:5557"`, `events: "tcp://10.0.0.7:5557", metrics: "ftp://x/metrics"`, 1), `pools[0].replicas[0].metrics: "ftp://x/metrics" is not an http(s) URL`},
		{"dp size", strings.Replace(minimal, `events: "tcp://10.0.0.7:5557"`, `events: "tcp://10.0.0.7:5557", data_parallel_size: 65`, 1), `pools[0].replicas[0].data_parallel_size: 65 is not within 1..64`},
		{"explicit zero ttl", "index: {ttl: 0}\n" + minimal, `index.ttl: 0s must be positive`},
		{"explicit zero queue", "ingest: {queue_size: 0}\n" + minimal, `ingest.queue_size: 0 must be positive`},
		{"explicit zero dp size", strings.Replace(minimal, `events: "tcp://10.0.0.7:5557"`, `events: "tcp://10.0.0.7:5557", data_parallel_size: 0`, 1), `pools[0].replicas[0].data_parallel_size: 0 is not within 1..64`},
		{"explicit empty keys", minimal + "    keys: \"\"\n", `pools[0].keys: "" is not one of tokens, engine`},
		{"tls half", "listen: {tls: {cert_file: a.pem}}\n" + minimal, `listen.tls: cert_file and key_file go together`},
		{"model in two pools", minimal + `  - name: other
    models: ["Qwen/Qwen3-8B"]
    replicas: [{name: x, address: 10.0.0.9:8000}]
`, `pools[1].models[0]: "Qwen/Qwen3-8B" is already served by pool "qwen3"`},
		{"shed status", "routing: {flow_control: {shed_status: 200}}\n" + minimal, `routing.flow_control.shed_status: 200 is not an HTTP error status (400..599)`},
		{"band twice", "routing: {flow_control: {bands: [{priority: 1, ttl: 1s}, {priority: 1, ttl: 2s}]}}\n" + minimal, `routing.flow_control.bands[1].priority: 1 is bands[0]'s too`},
		{"band ttl", "routing: {flow_control: {bands: [{priority: 1}]}}\n" + minimal, `routing.flow_control.bands[0].ttl: 0s must be positive`},
		{"objective twice", "routing: {flow_control: {objectives: [{name: chat, priority: 1}, {name: chat}]}}\n" + minimal, `routing.flow_control.objectives[1].name: "chat" is objectives[0]'s too`},
		{"objective unnamed", "routing: {flow_control: {objectives: [{priority: 1}]}}\n" + minimal, `routing.flow_control.objectives[0].name: must hold 1..253 bytes`},
		{"not yaml", "pools: [", "config is not valid YAML"},
		{"huge", strings.Replace(minimal, `models: ["Qwen/Qwen3-8B"]`, "models: ["+strings.Repeat("m, ", 100_000)+"m]", 1), "over 100000 nodes"},
		{"empty", "", "config is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
		})
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	_, err := Parse([]byte(`
log: {level: loud}
pools:
  - name: a
    models: [m]
    keys: engine
    replicas: [{name: r, address: nope}]
`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"log.level", "pools[0].hash.seed", "pools[0].replicas[0].address"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %s in:\n%v", want, err)
		}
	}
}

func TestSeedMayBeWrittenAsNumber(t *testing.T) {
	c, err := Parse([]byte(minimal + "    keys: engine\n    hash: {algorithm: sha256_cbor, seed: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].Hash.Seed == nil || *c.Pools[0].Hash.Seed != "0" {
		t.Fatalf("seed = %v", c.Pools[0].Hash.Seed)
	}
}

func TestBindModeNeedsDistinctTopics(t *testing.T) {
	_, err := Parse([]byte(`
ingest: {bind: "tcp://0.0.0.0:5557"}
pools:
  - name: a
    models: [m]
    replicas:
      - {name: r0, address: 10.0.0.1:8000, topic: "kv@10.0.0.1:8000@m"}
      - {name: r1, address: 10.0.0.2:8000, topic: "kv@10.0.0.1:8000@m"}
`))
	if err == nil || !strings.Contains(err.Error(), `pools[0].replicas[1].topic`) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadReportsMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !os.IsNotExist(err) {
		t.Fatalf("err = %v", err)
	}
}

// TestErrorsDoNotEchoLongValues: a 4 MB pool name (or key, or scalar) is
// reported by its first bytes and its length, not echoed whole.
func TestErrorsDoNotEchoLongValues(t *testing.T) {
	long := strings.Repeat("n", 4<<20)
	for name, doc := range map[string]string{
		"pool name":   strings.Replace(minimal, "name: qwen3", "name: "+long, 1),
		"address":     strings.Replace(minimal, "address: 10.0.0.7:8000", "address: "+long, 1),
		"body_mode":   minimal + "routing: {body_mode: " + long + "}\n",
		"unknown key": minimal + "routing:\n  ? " + long + "\n  : 1\n",
		"wrong type":  minimal + "index: {max_entries: " + long + "}\n",
	} {
		_, err := Parse([]byte(doc))
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if n := len(err.Error()); n > 2048 {
			t.Errorf("%s: error of %d bytes echoes the value", name, n)
		}
		if !strings.Contains(err.Error(), "(4194") {
			t.Errorf("%s: error does not give the value's length: %.300s", name, err)
		}
	}
}

// TestPeersNeedMutualTLSOrSayInsecure: a mesh without peers.tls is refused
// with a message naming the keys and the way out; plaintext is a choice
// that excludes TLS; addresses are gRPC's host:port.
func TestPeersNeedMutualTLSOrSayInsecure(t *testing.T) {
	mesh := "peers: {listen: \"0.0.0.0:5590\", addresses: [\"kvroute-0.kvroute-peers:5590\", \"kvroute-1.kvroute-peers:5590\"]"
	tls := "tls: {cert_file: c.pem, key_file: k.pem, ca_file: ca.pem}"
	for _, c := range []struct {
		name, peers string
		want        []string // substrings of the error; none: valid
	}{
		{"mutual TLS", mesh + ", " + tls + "}", nil},
		{"plaintext by choice", mesh + ", insecure: true}", nil},
		{"no TLS", mesh + "}", []string{"peers.tls.cert_file: required", "peers.tls.key_file: required", "peers.tls.ca_file: required", "peers.insecure: true"}},
		{"a CA is required", mesh + ", tls: {cert_file: c.pem, key_file: k.pem}}", []string{"peers.tls.ca_file: required"}},
		{"both", mesh + ", insecure: true, " + tls + "}", []string{"peers.insecure: true with peers.tls set"}},
		{"ZeroMQ endpoint", "peers: {listen: \"tcp://0.0.0.0:5590\", addresses: [\"tcp://kvroute-1:5590\"], " + tls + "}",
			[]string{"peers.listen: \"tcp://0.0.0.0:5590\": the mesh takes host:port", "peers.addresses[0]: \"tcp://kvroute-1:5590\": the mesh takes host:port"}},
		{"wildcard peer", "peers: {listen: \":5590\", addresses: [\"0.0.0.0:5590\"], " + tls + "}", []string{"peers.addresses[0]: \"0.0.0.0:5590\": a peer is reached at its host"}},
		{"empty allowed name", mesh + ", tls: {cert_file: c.pem, key_file: k.pem, ca_file: ca.pem, allowed_names: [\"\"]}}", []string{"peers.tls.allowed_names[0]: empty"}},
	} {
		_, err := Parse([]byte(minimal + c.peers + "\n"))
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error lacks %q:\n%v", c.name, w, err)
			}
		}
	}
}

func TestLiveFollowsTheReloadTag(t *testing.T) {
	for key, want := range map[string]bool{
		"routing.placement_slack": true, "routing.max_decide_bytes_in_flight": true, "routing.fail_open": true,
		"routing.body_mode": false, "routing.body_limit_bytes": false, "index.ttl": false,
		"pools[0].tokenizer": false, "pools[2].replicas[1].address": false,
		// A list of live keys is live whole (a band added or removed).
		"routing.flow_control.bands": true, "routing.flow_control.bands[1].ttl": true, "routing.flow_control.objectives": true,
		"pools": false, "pools[0].replicas": false,
	} {
		if got := Live(key); got != want {
			t.Errorf("Live(%q) = %v, want %v", key, got, want)
		}
	}
}

// TestEveryErrorInOnePass: decoding errors (unknown keys, wrong types) and
// validation errors of the same file are all reported.
func TestEveryErrorInOnePass(t *testing.T) {
	_, err := Parse([]byte(`
lisen: {extproc: ":9002"}
index: {ttl: soon, max_entries: 0}
routing: {kv_usage_ceiling: 1.5, placement_slak: 1}
pools:
  - name: qwen3
    models: ["Qwen/Qwen3-8B"]
    block_size: sixteen
    replicas:
      - {name: vllm-0, address: vllm-0, events: "tcp://10.0.0.7:5557"}
`))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`lisen: unknown key; did you mean "listen"?`,
		`index.ttl: "soon" is not a duration`,
		`index.max_entries: 0 must be positive`,
		`routing.kv_usage_ceiling: 1.5 is not within (0, 1]`,
		`routing.placement_slak: unknown key; did you mean "placement_slack"?`,
		`pools[0].block_size: "sixteen" is not a whole number`,
		`pools[0].replicas[0].address: "vllm-0" is not ip:port`,
	}
	lines := strings.Split(err.Error(), "\n")
	for _, w := range want {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }) {
			t.Errorf("missing %q", w)
		}
	}
	if len(lines) != len(want) {
		t.Errorf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
}

func TestUnknownKeySuggestsOnlyNearKeys(t *testing.T) {
	_, err := Parse([]byte("routing: {zzz: 1}\n" + minimal))
	if err == nil || strings.Contains(err.Error(), "did you mean") || !strings.Contains(err.Error(), "routing.zzz: unknown key (known:") {
		t.Fatalf("err = %v", err)
	}
}
