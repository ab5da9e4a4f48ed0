#!/usr/bin/env bash
# Checks that the fixture copies in DIR (default tests/fixtures) are still the bytes they were
# copied as: every file listed in DIR/SHA256SUMS exists with that SHA-256 (`sha256sum -c`
# semantics), and no file in DIR is missing from the list (a fixture added without a recorded
# hash, or left behind by a test, would otherwise go unnoticed).
#   check_fixtures.sh [DIR]      exit 0 when intact, 1 (naming every bad file) otherwise
#   check_fixtures.sh --self-test  proves the check fails on a changed, missing or unlisted file
set -uo pipefail

check() {
  local dir=$1 bad=0
  if [ ! -f "$dir/SHA256SUMS" ]; then
    echo "check_fixtures: $dir/SHA256SUMS is missing" >&2
    return 1
  fi
  # Changed or missing files: sha256sum names each one ("FAILED", "FAILED open or read").
  if ! (cd "$dir" && sha256sum --check --quiet --strict SHA256SUMS); then
    bad=1
  fi
  # Files on disk that the manifest does not list.
  local unlisted
  unlisted=$(comm -13 <(sed -E 's/^[0-9a-f]{64} [ *]//' "$dir/SHA256SUMS" | LC_ALL=C sort) \
                      <(cd "$dir" && find . \( -type f -o -type l \) ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort))
  if [ -n "$unlisted" ]; then
    echo "$unlisted" | sed 's/^/check_fixtures: not in SHA256SUMS: /' >&2
    bad=1
  fi
  if [ $bad -eq 0 ]; then
    echo "check_fixtures: $(grep -c . "$dir/SHA256SUMS") files in $dir match SHA256SUMS"
  fi
  return $bad
}

self_test() {
  local t
  t=$(mktemp -d)
  trap 'rm -rf "$t"' RETURN
  mkdir -p "$t/sub"
  printf 'abc' > "$t/a.bin"
  printf 'xyz' > "$t/sub/b.bin"
  (cd "$t" && sha256sum a.bin sub/b.bin > SHA256SUMS)
  check "$t" >/dev/null 2>&1 || { echo "self-test: an intact copy was rejected"; return 1; }
  printf 'abd' > "$t/a.bin"
  check "$t" >/dev/null 2>&1 && { echo "self-test: a changed byte was not detected"; return 1; }
  printf 'abc' > "$t/a.bin"
  mv "$t/sub/b.bin" "$t/b.moved"
  check "$t" >/dev/null 2>&1 && { echo "self-test: a missing and an unlisted file were not detected"; return 1; }
  mv "$t/b.moved" "$t/sub/b.bin"
  touch "$t/sub/new.bin"
  check "$t" >/dev/null 2>&1 && { echo "self-test: an unlisted file was not detected"; return 1; }
  echo "self-test: changed, missing and unlisted files are all detected"
}

if [ "${1:-}" = "--self-test" ]; then
  self_test
else
  check "${1:-$(cd "$(dirname "$0")" && pwd)/fixtures}"
fi
