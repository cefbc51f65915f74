#!/usr/bin/env bash
# flow-memory.sh MODE [BODY_KIB] [REQUESTS]: kvroute's memory and every
# request's end with its engines stalled and flow control's queue full.
#
# Starts two emulated vLLM engines that never finish a prefill (one sequence
# each, 1 s per prompt token), `kvroute serve` over them and
# `kvroute-bench gateway` in front (all on 127.0.0.1), then sends REQUESTS
# completions of BODY_KIB KiB each at once (scripts/flowload) and prints how
# each ended, kvroute's resident memory (VmRSS at the end of the burst,
# VmHWM: its peak) and the flow metrics. MODE: on (flow control on,
# defaults but saturation_waiting 0), off (flow control off), or idle (no
# requests: the process's own footprint). Needs bin/kvroute, bin/vllm-emu,
# bin/kvroute-bench (make build) and .cache/tokenizers/qwen3 (make testdata).
set -euo pipefail
mode=${1:?usage: flow-memory.sh on|off|idle [BODY_KIB] [REQUESTS]}
kib=${2:-32}
n=${3:-1500}
cd "$(dirname "$0")/.."
tok=$PWD/.cache/tokenizers/qwen3
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${KEEP:-}" ] && echo "kept $dir" || rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/flowload" ./scripts/flowload
base=${FLOW_MEMORY_PORT:-18100}
reps=""
for i in 0 1; do
	port=$((base + 1 + i)) ev=$((base + 11 + i))
	bin/vllm-emu --model m --tokenizer "$tok" --port "$port" --max-num-seqs 1 --emu-prefill-per-token 1s \
		--kv-events-config "{\"enable_kv_cache_events\":true,\"publisher\":\"zmq\",\"endpoint\":\"tcp://127.0.0.1:$ev\"}" \
		>"$dir/e$i.log" 2>&1 &
	pids+=($!)
	reps+="      - {name: e$i, address: \"127.0.0.1:$port\", events: \"tcp://127.0.0.1:$ev\", metrics: \"http://127.0.0.1:$port/metrics\"}"$'\n'
done
enabled=false
[ "$mode" = on ] && enabled=true
cat >"$dir/kvroute.yaml" <<YAML
listen: {extproc: "127.0.0.1:$((base + 20))", admin: "127.0.0.1:$((base + 21))"}
ingest: {scrape_interval: 100ms}
routing:
  prefill_tokens_per_second: 1000
  flow_control: {enabled: $enabled, saturation_waiting: 0}
pools:
  - name: p
    models: [m]
    tokenizer: $tok
    block_size: 16
    replicas:
$reps
YAML
bin/kvroute serve --config "$dir/kvroute.yaml" >"$dir/kvroute.log" 2>&1 &
kv=$!
pids+=($kv)
bin/kvroute-bench gateway --listen "127.0.0.1:$((base + 30))" --extproc "127.0.0.1:$((base + 20))" >"$dir/gw.log" 2>&1 &
pids+=($!)
admin="http://127.0.0.1:$((base + 21))"
for _ in $(seq 100); do
	curl -sf "$admin/metrics" >/dev/null && curl -sf "http://127.0.0.1:$((base + 1))/metrics" >/dev/null && break
	sleep 0.2
done
sleep 1 # a scrape of each engine
rss() { awk '/^VmRSS|^VmHWM/ {printf "%s %s %s  ", $1, $2, $3}' "/proc/$kv/status"; echo; }
echo "kvroute before: $(rss)"
if [ "$mode" != idle ]; then
	# The peak queue while the burst waits: sampled every 100 ms.
	(
		peak=0
		while sleep 0.1; do
			q=$(curl -sf "$admin/metrics" | awk '/^kvroute_flow_queued_requests/ {s += $2} END {print s + 0}') || break
			[ "$q" -gt "$peak" ] && peak=$q && echo "$peak" >"$dir/peak"
		done
	) &
	sampler=$!
	"$dir/flowload" --url "http://127.0.0.1:$((base + 30))/v1/completions" --n "$n" --body-kib "$kib"
	kill "$sampler" 2>/dev/null || true
	echo "peak queued requests: $(cat "$dir/peak" 2>/dev/null || echo 0)"
fi
echo "kvroute after: $(rss)"
curl -sf "$admin/metrics" | grep -E '^kvroute_flow_(shed|released)_total|^kvroute_route_decisions_total' | sort || true
