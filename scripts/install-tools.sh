#!/usr/bin/env bash
# install-tools.sh installs the lint tools `make lint` runs, at the pinned
# versions below (their one owner), into the ignored .cache/bin/.
# Idempotent: a binary already built from the pinned version is kept.
# Both versions are on the Go module proxy and build with Go 1.26.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN="$PWD/.cache/bin"

# package@version, one per line.
TOOLS="
honnef.co/go/tools/cmd/staticcheck@v0.8.2
golang.org/x/tools/cmd/deadcode@v0.52.0
"

mkdir -p "$BIN"
for tool in $TOOLS; do
	pkg=${tool%@*}
	version=${tool#*@}
	exe="$BIN/$(basename "$pkg")"
	# `go version -m` prints "mod <module> <version> …" for the main module.
	if [ -x "$exe" ] && go version -m "$exe" 2>/dev/null | awk '$1 == "mod" { print $3 }' | grep -qx "$version"; then
		continue
	fi
	echo "install-tools: $tool" >&2
	GOBIN="$BIN" go install "$tool"
done
