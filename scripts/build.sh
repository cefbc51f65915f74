#!/usr/bin/env bash
# build.sh builds kvroute's commands into BIN (default bin/) and shows
# progress: a first build on an empty Go cache compiles a few hundred
# packages and takes minutes on a small machine, and a silent build that
# long reads as a hang. A cached build prints one line.
# Usage: build.sh [BIN]   (GO overrides the go command)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
BIN=${1:-bin}

total=$($GO list -deps ./cmd/... | wc -l)
echo "build: $BIN/kvroute, $BIN/vllm-emu, $BIN/kvroute-bench ($total packages; a first build compiles them all and takes a few minutes on 2 cores, later builds seconds)"
start=$(date +%s)
tty=0
[ -t 1 ] && tty=1
# go build -v names each package as it compiles it; anything else (a
# compile error) is printed as it is.
set -o pipefail
$GO build -v -o "$BIN/" ./cmd/... 2>&1 | awk -v total="$total" -v tty="$tty" '
	/^[^ :]+$/ {
		n++
		if (tty) { printf "\rbuild: compiled %d of at most %d packages", n, total; fflush() }
		else if (n % 50 == 0) { printf "build: compiled %d of at most %d packages\n", n, total; fflush() }
		next
	}
	{ if (tty && n) printf "\n"; print; fflush() }
	END { if (tty && n) printf "\n" }'
echo "build: done in $(($(date +%s) - start)) s"
