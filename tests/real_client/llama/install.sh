#!/usr/bin/env bash
# Installs the GGUF real client, llama.cpp's prebuilt CPU build for linux-x64 from npm
# (node-llama-cpp@3.22.1 + @node-llama-cpp/linux-x64@3.22.1, exactly as package-lock.json
# pins them), into a folder outside the clone: $CKPT_LLAMA_DIR, by default
# $HOME/.cache/ckptkit/llama-3.22.1. Idempotent: a folder installed from the same lock file
# (its SHA-256 is stamped there) is kept. `npm ci` is not used: it fails on the optional
# packages of other platforms that were never published; `npm install` with the committed
# lock file, scripts off (no download, no build) and optional packages omitted installs the
# same tree. Prints the time taken and the size.
# Exit: 0 installed; 77 npm or its registry cannot be reached (the caller skips, unless
# CKPT_REQUIRE_LLAMA=1: then 1); 1 any other failure.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${CKPT_LLAMA_DIR:-$HOME/.cache/ckptkit/llama-3.22.1}"
lib="$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"

unreachable() {
  echo "llama-client: $1"
  if [ "${CKPT_REQUIRE_LLAMA:-0}" = 1 ]; then
    echo "llama-client: CKPT_REQUIRE_LLAMA=1: the real-client test cannot be skipped here"
    exit 1
  fi
  exit 77
}

if [ -f "$lib" ] && [ "$(cat "$dir/.ckptkit-lock-sha256" 2>/dev/null)" = "$want" ]; then
  echo "llama-client: installed in $dir (package-lock.json $want)"
  exit 0
fi
command -v npm >/dev/null 2>&1 || unreachable "npm is not installed"
command -v node >/dev/null 2>&1 || unreachable "node is not installed"

# A quick answer first: an unreachable registry would make npm install retry for minutes.
timeout 60 npm ping --fetch-retries=0 >/dev/null 2>&1 || unreachable "the npm registry cannot be reached (npm ping failed)"

mkdir -p "$(dirname "$dir")"
tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$tmp/"
start=$(date +%s.%N)
if ! (cd "$tmp" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --ignore-scripts --omit=optional --no-audit \
        --no-fund --fetch-retries=1 --fetch-timeout=60000 >"$tmp/npm.log" 2>&1); then
  tail -20 "$tmp/npm.log"
  if ! timeout 60 npm ping --fetch-retries=0 >/dev/null 2>&1; then unreachable "the npm registry cannot be reached (npm ping failed)"; fi
  echo "llama-client: npm install failed (the registry answers: not a network problem)"
  exit 1
fi
end=$(date +%s.%N)
if [ ! -f "$tmp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so" ]; then
  echo "llama-client: npm install finished but libggml-base.so is missing"
  exit 1
fi
echo "$want" >"$tmp/.ckptkit-lock-sha256"
rm -rf "$dir" && mv "$tmp" "$dir" && trap - EXIT
printf 'llama-client: installed in %s in %.1f s, %s\n' "$dir" "$(echo "$end - $start" | bc)" "$(du -sh "$dir" | cut -f1)"
