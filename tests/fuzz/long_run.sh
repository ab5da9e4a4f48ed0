#!/usr/bin/env bash
# Long run of one fuzz target with the documented limits, from a private copy of the
# binary (so rebuilding build-asan does not disturb it). Usage:
#   tests/fuzz/long_run.sh TARGET SECONDS [BUILD_DIR]
# Corpus: BUILD_DIR/long/corpus/TARGET (seeded from tests/fuzz/corpus/TARGET); crashes:
# BUILD_DIR/long/artifacts/TARGET/; log: BUILD_DIR/long/TARGET.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$1 seconds=$2 build=${3:-build-asan}
long=$build/long
mkdir -p "$long/bin" "$long/corpus/$target" "$long/artifacts/$target"
cp "$build/fuzz_$target" "$long/bin/fuzz_$target"
cp -rn "tests/fuzz/corpus/$target/." "$long/corpus/$target/"
exec "$long/bin/fuzz_$target" -rss_limit_mb=2048 -malloc_limit_mb=96 -timeout=1 -max_total_time="$seconds" \
  -print_final_stats=1 -dict="tests/fuzz/dict/$target.dict" -artifact_prefix="$long/artifacts/$target/" \
  "$long/corpus/$target" > "$long/$target.log" 2>&1
