#!/usr/bin/env bash
# Regenerates golden/*.json from fresh conversions of the fixtures (golden/cases.tsv),
# then prints what changed for review. Usage: golden/update.sh path/to/ckpt [FIXTURES_DIR]
# (make golden-update). Review the diff before committing: a changed golden manifest
# means the converter's output bytes moved.
set -euo pipefail
CKPT=$(readlink -f "$1")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIXTURES=$(readlink -f "${2:-$ROOT/tests/fixtures}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
while IFS=$'\t' read -r name cmd fixture; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  # $cmd is a subcommand plus options: word splitting is intended. Run from the fixtures
  # directory with the fixture's relative path: an expert pack's manifest.json records its
  # source path, and the manifest must not depend on where the checkout lives.
  # shellcheck disable=SC2086
  (cd "$FIXTURES" && "$CKPT" $cmd "$fixture" "$tmp/$name" >/dev/null)
  "$CKPT" hash -q --algo both "$tmp/$name" -o "$ROOT/golden/$name.json"
  echo "golden/$name.json"
done < "$ROOT/golden/cases.tsv"
echo "== git diff --stat golden/"
git -C "$ROOT" diff --stat -- golden/
git -C "$ROOT" status --short -- golden/
git -C "$ROOT" diff -- golden/
