#!/usr/bin/env bash
# Packs what a GPU machine needs to run the GPU checks into DIR (default gpu-run/ in the
# repository root, ignored by git): stripped ckpt, ckpt-gpu and ckpt_tests from BUILD, the
# shared libraries they load (lib/, found through their $ORIGIN/lib rpath), and
# tools/gpu_check.sh. The fixtures are not copied: they are in the tree (tests/fixtures),
# which travels to the device anyway; gpu_check.sh reads them from ../tests/fixtures.
set -euo pipefail
BUILD=${1:-build}
DIR=${2:-gpu-run}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$DIR"
mkdir -p "$DIR/lib"
for b in ckpt ckpt-gpu ckpt_tests; do
  strip -o "$DIR/$b" "$BUILD/$b"
done
for lib in $(ldd "$BUILD/ckpt_tests" "$BUILD/ckpt-gpu" | awk '/=>/ {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libgcc_s.so*|libstdc++.so*|libpthread.so*|libdl.so*|librt.so*) ;;  # the system's own
    *) cp -L "$lib" "$DIR/lib/" ;;
  esac
done
cp "$ROOT/tools/gpu_check.sh" "$DIR/"
cp -r "$ROOT/tests/real_client" "$DIR/"
du -sh "$DIR"
