#!/usr/bin/env bash
# Expert-pack validation against `cat GGUF PACK/* > /dev/null`, and repack-experts with and
# without the source's SHA-256 tree, on the same files in the same run, page cache warm,
# best of 3 each, the variants interleaved round by round (never a timed test). Usage:
#   bench/pack_validate.sh BIN_DIR [DATA_DIR]          BIN_DIR holds ckpt (and ckpt-gpu)
# Input: BENCH_GGUF_FINITE=1 bench/make_gguf.py GGUF BENCH_PACK_LAYERS (16) BENCH_PACK_EXPERTS
# (64), ~1.5 GB; 48 layers make the ~4.6 GB file of the GPU host's figures. Two packs of it:
# `tree` (the default manifest, with the SHA-256 tree) and `old` (--tree-chunk 0: the
# manifest as written before the tree, which validators check by the serial SHA-256).
# Timed: cat; `ckpt validate -q --reference GGUF` of both packs; with BENCH_PACK_GPU=1 also
# `ckpt-gpu verify -q --reference GGUF` of both; repack-experts with and without the tree.
# BENCH_PACK_BEFORE=DIR: DIR/ckpt (and DIR/ckpt-gpu) built from the commit before, timed on
# the same files (validate/verify of the old pack, repack). Goal: cat / validate >= 0.8.
set -euo pipefail
BIN=$(readlink -f "$1")
DATA=${2:-bench-data}
LAYERS=${BENCH_PACK_LAYERS:-16}
EXPERTS=${BENCH_PACK_EXPERTS:-64}
BEFORE=${BENCH_PACK_BEFORE:-}
[ -n "$BEFORE" ] && BEFORE=$(readlink -f "$BEFORE")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
DIR="$DATA/pack-validate"
IN="$DIR/moe-${LAYERS}x${EXPERTS}.gguf"
mkdir -p "$DIR"
[ -f "$IN" ] || BENCH_GGUF_FINITE=1 python3 "$HERE/make_gguf.py" "$IN" "$LAYERS" "$EXPERTS" > /dev/null
bytes=$(stat -c %s "$IN")
gb() { python3 -c "print(f'{$1/1e9:.2f}')"; }
gbs() { python3 -c "print(f'{$1/$2/1e9:.2f}')"; }
echo "== expert pack: validate --reference vs cat, repack with/without the SHA-256 tree"
echo "input $IN ($(gb "$bytes") GB), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
cat "$IN" > /dev/null

# interleaved NAME... : runs each function NAME once per round, RUNS rounds (default 3), round
# after round (so a machine whose load drifts slows every variant alike), and sets T_NAME to
# its best wall time. A failing run stops the benchmark.
interleaved() {
  local name t0 t1
  for name in "$@"; do eval "T_$name="; done
  for _ in $(seq "${BENCH_PACK_RUNS:-3}"); do
    for name in "$@"; do
      t0=$(date +%s.%N)
      "$name" > /dev/null 2>&1 || { echo "failed: $name" >&2; exit 1; }
      t1=$(date +%s.%N)
      eval "T_$name=\$(python3 -c \"t=$t1-$t0; b='\${T_$name}'; print(min(t, float(b)) if b else t)\")"
    done
  done
}
f3() { python3 -c "print(f'{$1:.2f}')"; }

repack_tree() { rm -rf "$DIR/p"; "$BIN/ckpt" repack-experts -q "$IN" "$DIR/p"; }
repack_none() { rm -rf "$DIR/p"; "$BIN/ckpt" repack-experts -q --tree-chunk 0 "$IN" "$DIR/p"; }
repack_before() { rm -rf "$DIR/p"; "$BEFORE/ckpt" repack-experts -q "$IN" "$DIR/p"; }
if [ -n "$BEFORE" ]; then interleaved repack_tree repack_none repack_before; else interleaved repack_tree repack_none; fi
echo "repack, tree (default):     $(f3 "$T_repack_tree") s ($(gbs "$bytes" "$T_repack_tree") GB/s of input)"
echo "repack, --tree-chunk 0:     $(f3 "$T_repack_none") s   cost of the tree: ratio tree/none $(ratio "$T_repack_tree" "$T_repack_none")"
[ -n "$BEFORE" ] && echo "repack, before:             $(f3 "$T_repack_before") s   ratio after (tree)/before $(ratio "$T_repack_tree" "$T_repack_before")"
rm -rf "$DIR/p" "$DIR/tree" "$DIR/old"
"$BIN/ckpt" repack-experts -q "$IN" "$DIR/tree"
"$BIN/ckpt" repack-experts -q --tree-chunk 0 "$IN" "$DIR/old"

files=("$IN" "$DIR/tree"/*)
all=$(cat "${files[@]}" | wc -c)
cat_all() { cat "${files[@]}" > /dev/null; }
cat_all
val_tree() { "$BIN/ckpt" validate -q --reference "$IN" "$DIR/tree"; }
val_old() { "$BIN/ckpt" validate -q --reference "$IN" "$DIR/old"; }
val_before() { "$BEFORE/ckpt" validate -q --reference "$IN" "$DIR/old"; }
gpu_tree() { "$BIN/ckpt-gpu" verify -q --reference "$IN" "$DIR/tree"; }
gpu_old() { "$BIN/ckpt-gpu" verify -q --reference "$IN" "$DIR/old"; }
gpu_before() { "$BEFORE/ckpt-gpu" verify -q --reference "$IN" "$DIR/old"; }
runs=(cat_all val_tree val_old)
[ -n "$BEFORE" ] && runs+=(val_before)
if [ "${BENCH_PACK_GPU:-0}" = 1 ]; then
  runs+=(gpu_tree gpu_old)
  [ -n "$BEFORE" ] && runs+=(gpu_before)
fi
interleaved "${runs[@]}"
echo "cat GGUF PACK/*:            $(f3 "$T_cat_all") s ($(gb "$all") GB, $(gbs "$all" "$T_cat_all") GB/s)"
declare -A label=([val_tree]="validate, tree pack:" [val_old]="validate, old pack:" [val_before]="validate, before (old pack):"
                  [gpu_tree]="gpu verify, tree pack:" [gpu_old]="gpu verify, old pack:" [gpu_before]="gpu verify, before (old):")
for r in "${runs[@]:1}"; do
  eval "t=\$T_$r"
  printf '%-27s %s s (%s GB/s)   ratio cat/this %s (goal >= 0.8)\n' "${label[$r]}" "$(f3 "$t")" "$(gbs "$all" "$t")" "$(ratio "$T_cat_all" "$t")"
done
[ -n "$BEFORE" ] && echo "validate before/after (tree pack): $(ratio "$T_val_before" "$T_val_tree")x faster"
rm -rf "$DIR/tree" "$DIR/old"
