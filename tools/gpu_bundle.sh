#!/usr/bin/env bash
# Packs what a GPU machine needs to run the GPU checks into DIR (default gpu-run/, ignored
# by git): stripped ckpt, ckpt-gpu and ckpt_tests from BUILD, the shared libraries they
# load (lib/, found through their $ORIGIN/lib rpath), the fixtures the GPU tests read, and
# tools/gpu_check.sh. ../shared does not travel to the device; this folder does.
set -euo pipefail
BUILD=${1:-build}
DIR=${2:-gpu-run}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIX=${CKPT_FIXTURES:-$ROOT/../shared/fixtures}
rm -rf "$DIR"
mkdir -p "$DIR/lib" "$DIR/fixtures/oracle" "$DIR/fixtures/ggml"
for b in ckpt ckpt-gpu ckpt_tests; do
  strip -o "$DIR/$b" "$BUILD/$b"
done
for lib in $(ldd "$BUILD/ckpt_tests" "$BUILD/ckpt-gpu" | awk '/=>/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libgcc_s.so*|libstdc++.so*|libpthread.so*|libdl.so*|librt.so*) ;;  # the system's own
    *) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
cp -r "$FIX/oracle/dsv4-tiny" "$DIR/fixtures/oracle/"
cp "$FIX/ggml/qwen3next-tiny.gguf" "$DIR/fixtures/ggml/"
cp "$ROOT/tools/gpu_check.sh" "$DIR/"
cp -r "$ROOT/tests/real_client" "$DIR/"
du -sh "$DIR"
