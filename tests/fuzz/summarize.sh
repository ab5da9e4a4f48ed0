#!/usr/bin/env bash
# Prints one Markdown table row per long-run log (tests/fuzz/long_run.sh):
# target | seconds | executions | cov | ft | corpus | peak RSS | result.
# Usage: tests/fuzz/summarize.sh [LOG_DIR]   (default build-asan/long)
set -euo pipefail
dir=${1:-build-asan/long}
for log in "$dir"/*.log; do
  t=$(basename "$log" .log)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo "?")
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*' || echo "?")
  corp=$(grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' <<<"$last" | cut -d' ' -f2 || echo "?")
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo "?")
  if grep -qE 'ERROR: libFuzzer|ERROR: AddressSanitizer|runtime error|SUMMARY:' "$log"; then res=FAILED; else res=clean; fi
  echo "| $t | $secs | $runs | $cov | $ft | $corp | ${rss} MB | $res |"
done
