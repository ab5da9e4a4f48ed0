#!/usr/bin/env bash
# version_test.sh CKPT CKPT_GPU SOURCE_DIR: --version of both binaries names the release and
# the commit; cmake/build_info.cmake gives "unknown" outside a git checkout (a tarball) and
# the given commit when a packager sets one; a report names the commit, while what a
# conversion writes (config.json's ckptkit_conversion, .ckptkit records) names only the version.
set -euo pipefail
ckpt=$1 gpu=$2 src=$3
fail() { echo "FAIL: $*"; exit 1; }
re='^ckptkit [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{7,40}(-dirty)?|unknown|[0-9A-Za-z._+-]+)\)$'
for b in "$ckpt" "$gpu"; do
  v=$("$b" --version)
  [[ $v =~ $re ]] || fail "$(basename "$b") --version: '$v'"
  echo "ok   $(basename "$b") --version: $v"
done
commit=$("$ckpt" --version | sed 's/.*(commit \(.*\))$/\1/')
if git -C "$src" rev-parse HEAD >/dev/null 2>&1 && [ -e "$src/.git" ]; then
  head=$(git -C "$src" rev-parse --short=12 HEAD)
  [[ $commit == "$head" || $commit == "$head-dirty" ]] || echo "note: built from $commit, the tree is now at $head (rebuild to update)"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/tarball"
cmake -DOUT="$tmp/a.cpp" -DSRC="$tmp/tarball" -P "$src/cmake/build_info.cmake"
grep -q 'return "unknown";' "$tmp/a.cpp" || fail "outside git: $(cat "$tmp/a.cpp")"
echo "ok   outside a git checkout: unknown"
cmake -DOUT="$tmp/b.cpp" -DSRC="$tmp/tarball" -DCOMMIT=1a2b3c4d5e6f -P "$src/cmake/build_info.cmake"
grep -q 'return "1a2b3c4d5e6f";' "$tmp/b.cpp" || fail "CKPT_GIT_COMMIT override: $(cat "$tmp/b.cpp")"
echo "ok   -DCKPT_GIT_COMMIT=1a2b3c4d5e6f is used as given"
touch -d '2000-01-01' "$tmp/b.cpp"
cmake -DOUT="$tmp/b.cpp" -DSRC="$tmp/tarball" -DCOMMIT=1a2b3c4d5e6f -P "$src/cmake/build_info.cmake"
[ "$(stat -c %Y "$tmp/b.cpp")" -lt 1000000000 ] || fail "an unchanged commit rewrote the file (everything would relink)"
echo "ok   an unchanged commit leaves the generated file alone"
# The report names the commit; the conversion's own files name the version only.
"$ckpt" validate --json "$tmp/report.json" "$src/tests/fixtures/oracle/dsv4-tiny" >/dev/null
grep -q "\"commit\":\"$commit\"" "$tmp/report.json" || fail "validate --json lacks tool.commit $commit"
echo "ok   validate --json: tool.commit = $commit"
"$ckpt" convert -q "$src/tests/fixtures/oracle/dsv4-tiny" "$tmp/out" --json "$tmp/convert.json" >/dev/null
grep -q "\"commit\":\"$commit\"" "$tmp/convert.json" || fail "convert --json lacks tool.commit"
if grep -rq -- "$commit" "$tmp/out"; then fail "the commit entered the converted output: $(grep -rl -- "$commit" "$tmp/out")"; fi
grep -q '"ckptkit_conversion"' "$tmp/out/config.json" || fail "no ckptkit_conversion in config.json"
echo "ok   convert: the report names the commit, OUT (config.json, .ckptkit/) does not"
