#!/usr/bin/env bash
# Output path benchmark (issue 33): every job that writes large files against the disk's
# O_DIRECT write bandwidth measured in the same run (never a timed test).
#
# Usage: bench/write_direct.sh CKPT [DATA_DIR] [--before]
#   BENCH_WRITE_GIB  input size in GiB of each job (default 1; the lead runs >= 4 on the
#                    16-core GPU host)
#   --before         also runs every job with --buffered (the page-cache path, dropped
#                    behind the writer), so the before/after pair is in one run
#   BENCH_BASE_CKPT  a ckpt built without the direct writer (e.g. main before issue 33):
#                    its rows ("base") show the old page-cache writes in the same run; or
#                    any other build to compare with, named by BENCH_BASE_LABEL
#   BENCH_JOBS       which jobs run (default "v4 v3 gguf relayout")
#   BENCH_V4_MODES   the V4 conversions' --experts modes (default "keep int8-shift bf16")
#   BENCH_FLAGS      more options for every convert job of the binary measured (e.g.
#                    "--threads 8"), named in the job column
#   BENCH_REPS       runs of each job (default 1), each right after its own dd: the row
#                    gives the median ratio and the range (a VM's disk drifts by 25 %)
# Baseline (at the start and, unless BENCH_PAIRED=0, again right before each job): 4
# `dd oflag=direct` processes of 64 MiB blocks in parallel writing BENCH_WRITE_GIB
# GiB in all, fsynced (conv=fsync). Jobs: convert --experts keep / int8-shift / bf16 of a
# DeepSeek-V4-layout shard (bench/make_data.py: I8+E8M0 MXFP4 experts, F8_E4M3+E8M0
# linears), convert of a DeepSeek-V3-layout shard (F8_E4M3 + F32 weight_scale_inv), and
# repack-experts of a qwen3next-like GGUF (bench/make_gguf.py), by default (the source's
# SHA-256 tree, on every core) and with --source-sha256 (the whole-file SHA-256 too: one
# stream on one core, `openssl dgst -sha256` of the GGUF is printed as that job's second
# baseline; a base binary from before the tree was the default writes it too), and relayout --tp 8 of a
# Qwen3-235B-layout FP8 shard (tools/make_qwen3_moe_fp8.py). Input warm in the page cache
# for every job. Per job: output bytes, seconds, GB/s, ratio to dd, page-cache growth
# (/proc/meminfo Cached after - before, as % of the bytes written; other processes on the
# host add noise) and peak RSS.
set -euo pipefail
CKPT=$(readlink -f "$1")
DATA=${2:-bench-data}
BEFORE=0
[ "${3:-}" = "--before" ] && BEFORE=1
GIB=${BENCH_WRITE_GIB:-1}
HERE=$(dirname "$0")
DIR="$DATA/write-direct"
mkdir -p "$DIR"

# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

MB=$(python3 -c "print(int($GIB * 1024 * 1.074))")  # >= GIB GiB of input (make_data counts MB)
V4="$DIR/v4-${GIB}g"; V3="$DIR/v3-${GIB}g"
LAYERS=$(python3 -c "import math; print(max(1, math.ceil($GIB * 2**30 / 93e6)))")
GGUF="$DIR/moe-${LAYERS}x64.gguf"
QW="$DIR/qwen235b-layout-${GIB}g"
JOBS=" ${BENCH_JOBS:-v4 v3 gguf relayout} "
want() { [[ "$JOBS" == *" $1 "* ]]; }
want v4 && { [ -f "$V4/model.safetensors.index.json" ] || python3 "$HERE/make_data.py" "$V4" 1 "$MB" > /dev/null; }
want v3 && { [ -f "$V3/model.safetensors.index.json" ] || BENCH_LAYOUT=v3 python3 "$HERE/make_data.py" "$V3" 1 "$MB" > /dev/null; }
want gguf && { [ -f "$GGUF" ] || python3 "$HERE/make_gguf.py" "$GGUF" "$LAYERS" 64 > /dev/null; }
if want relayout && [ ! -f "$QW/config.json" ]; then
  # Qwen3-235B-A22B-FP8's layer shapes (bench/make_qwen235b_layout.sh): ~2.55 GB a layer.
  QL=$(python3 -c "import math; print(max(1, math.ceil($GIB * 2**30 / 2.55e9)))")
  bash "$HERE/make_qwen235b_layout.sh" "$QW" "$QL"
fi

# --- the baseline ------------------------------------------------------------------------
# Measured at the start and again right before every job (BENCH_PAIRED=0: at the start
# only): on the GPU host the disk's own speed drifts by up to 25 % over a few minutes of
# writing (2.8 -> 1.9 GB/s in one session), so a job is compared with the dd next to it.
blocks=$(python3 -c "print(max(1, round($GIB * 1024 / 64 / 4)))")
dd_bytes=$((4 * blocks * 64 * 1024 * 1024))
measure_dd() {
  rm -f "$DIR"/dd.*; sync
  local t0 t1
  t0=$(date +%s.%N)
  for i in 0 1 2 3; do
    dd if=/dev/zero of="$DIR/dd.$i" bs=64M count="$blocks" oflag=direct conv=fsync status=none &
  done
  wait
  t1=$(date +%s.%N)
  rm -f "$DIR"/dd.*
  dd_gbs=$(python3 -c "print(f'{$dd_bytes / ($t1 - $t0) / 1e9:.3f}')")
  dd_secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
}
measure_dd

echo "== output path vs dd oflag=direct (4 streams x 64 MiB blocks), $(nproc) cores, inputs ~${GIB} GiB"
echo "dd oflag=direct: $(python3 -c "print(f'{$dd_bytes/1e9:.2f}')") GB in ${dd_secs} s = ${dd_gbs} GB/s$([ "${BENCH_PAIRED:-1}" = 1 ] && echo "; measured again right before each job (its row's dd column)")"
REPS=${BENCH_REPS:-1}
[ "$REPS" -gt 1 ] && echo "each job run $REPS times, each right after its own dd; s, GB/s, dd and / dd are medians, range = lowest-highest / dd"
printf '| %-36s | %-8s | %9s | %7s | %6s | %7s | %7s | %11s | %12s | %9s |\n' job path "output GB" s "GB/s" "dd GB/s" "/ dd" "range" "cache growth" "peak RSS"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..38})" "----------" "----------:" "--------:" "-------:" "--------:" "--------:" "------------:" "-------------:" "----------:"

# Runs one job BENCH_REPS times (OUT removed before and after each run), each run right
# after its own dd unless BENCH_PAIRED=0; prints one table row: medians, the range of the
# ratio, the largest cache growth and peak RSS.
run_job() {
  local label=$1 path=$2 out=$3 runs
  shift 3
  runs=$(mktemp)
  for ((rep = 0; rep < REPS; rep++)); do
    rm -rf "$out"; sync
    [ "${BENCH_PAIRED:-1}" = 1 ] && measure_dd
    python3 - "$out" "$dd_gbs" "$@" >> "$runs" <<'PY'
import os, resource, subprocess, sys, time
out, dd_gbs, *cmd = sys.argv[1:]
def cached():
    for line in open("/proc/meminfo"):
        if line.startswith("Cached:"):
            return int(line.split()[1]) * 1024
before = cached()
t0 = time.monotonic()
subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
t = time.monotonic() - t0
growth = cached() - before
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
n = 0
for root, dirs, files in os.walk(out):
    dirs[:] = [d for d in dirs if not d.startswith(".")]
    n += sum(os.path.getsize(os.path.join(root, f)) for f in files)
print(n, t, dd_gbs, growth, rss)
PY
    rm -rf "$out"
  done
  python3 - "$label" "$path" "$runs" <<'PY'
import statistics, sys
label, path, runs = sys.argv[1:]
rows = [[float(x) for x in line.split()] for line in open(runs) if line.strip()]
n = rows[0][0]
ratios = [r[0] / r[1] / 1e9 / r[2] for r in rows]
med = statistics.median
t, dd = med(r[1] for r in rows), med(r[2] for r in rows)
growth, rss = max(r[3] for r in rows), max(r[4] for r in rows)
span = f"{min(ratios):.2f}-{max(ratios):.2f}" if len(rows) > 1 else ""
print(f"| {label:<36} | {path:<8} | {n / 1e9:9.2f} | {t:7.2f} | {n / t / 1e9:6.2f} | {dd:7.2f} | {med(ratios):7.2f} | "
      f"{span:>11} | {100 * growth / n:11.0f}% | {rss / 2**20:5.0f} MiB |")
PY
  rm -f "$runs"
}

paths=(direct)
[ "$BEFORE" = 1 ] && paths=(buffered direct)
BL=${BENCH_BASE_LABEL:-base}  # the base rows' name in the path column (at most 8 characters)
[ -n "${BENCH_BASE_CKPT:-}" ] && paths=("$BL" "${paths[@]}")
BASE=$(readlink -f "${BENCH_BASE_CKPT:-$CKPT}")
# The binary and flags of one path.
tool() { if [ "$1" = "$BL" ]; then echo "$BASE"; else echo "$CKPT"; fi; }
# BENCH_FLAGS: the measured binary's extra convert options (not the base binary's).
read -r -a extra <<< "${BENCH_FLAGS:-}"
flags_of() { flag=(); [ "$1" = buffered ] && flag=(--buffered); [ "$1" != "$BL" ] && flag+=("${extra[@]}"); true; }
label_of() { if [ ${#extra[@]} -gt 0 ] && [ "$2" != "$BL" ]; then echo "$1 ${extra[*]}"; else echo "$1"; fi; }
want v4 && for mode in ${BENCH_V4_MODES:-keep int8-shift bf16}; do
  for p in "${paths[@]}"; do
    flags_of "$p"
    cat "$V4"/*.safetensors > /dev/null
    run_job "$(label_of "convert V4 --experts $mode" "$p")" "$p" "$DIR/out" "$(tool "$p")" convert -q "${flag[@]}" --experts "$mode" "$V4" "$DIR/out"
  done
done
want v3 && for p in "${paths[@]}"; do
  flags_of "$p"
  cat "$V3"/*.safetensors > /dev/null
  run_job "$(label_of "convert V3 layout" "$p")" "$p" "$DIR/out" "$(tool "$p")" convert -q "${flag[@]}" "$V3" "$DIR/out"
done
if want gguf; then
  for p in "${paths[@]}"; do
    flag=(); [ "$p" = buffered ] && flag=(--buffered)
    cat "$GGUF" > /dev/null
    run_job "repack-experts GGUF" "$p" "$DIR/out" "$(tool "$p")" repack-experts -q "${flag[@]}" "$GGUF" "$DIR/out"
  done
  # The whole-file SHA-256 asked for: bound by one SHA-256 stream (openssl dgst below).
  cat "$GGUF" > /dev/null
  run_job "repack-experts --source-sha256" direct "$DIR/out" "$CKPT" repack-experts -q --source-sha256 "$GGUF" "$DIR/out"
fi
if want relayout; then
  for p in "${paths[@]}"; do
    # A base binary from before relayout existed (41ba9e0) has no row here.
    # (an unknown subcommand's --help prints the top-level help and exits 0: read the list)
    [ "$p" = "$BL" ] && ! "$BASE" --help 2>&1 | grep -qw relayout && continue
    flag=(); [ "$p" = buffered ] && flag=(--buffered)
    cat "$QW"/*.safetensors > /dev/null
    run_job "relayout --tp 8 (Qwen3-235B layout)" "$p" "$DIR/out" "$(tool "$p")" relayout -q --tp 8 "${flag[@]}" "$QW" "$DIR/out"
  done
fi
echo "(cache growth = /proc/meminfo Cached after - before, % of output bytes; base: the ckpt given as BENCH_BASE_CKPT)"
if want gguf; then
  # The one-stream bound of a default repack: its whole-file SHA-256 of the source.
  cat "$GGUF" > /dev/null
  t0=$(date +%s.%N); openssl dgst -sha256 "$GGUF" > /dev/null; t1=$(date +%s.%N)
  python3 -c "s = $(stat -c %s "$GGUF"); t = $t1 - $t0; print(f'openssl dgst -sha256 of the GGUF ({s / 1e9:.2f} GB, one stream): {t:.2f} s = {s / t / 1e9:.2f} GB/s = {s / t / 1e9 / $dd_gbs:.2f} x dd (the bound of a repack that writes source.sha256)')"
fi

# The writer's pool of pwrite threads against io_uring, same buffers, same requests in flight.
if [ -f /usr/include/liburing.h ] && command -v g++ > /dev/null; then
  g++ -std=c++20 -O2 "$HERE/uring_write_bench.cpp" -o "$DIR/uring_write_bench" -luring -lpthread
  "$DIR/uring_write_bench" "$DIR" "$GIB" 3
else
  echo "io_uring: not measured (no liburing-dev here)"
fi
