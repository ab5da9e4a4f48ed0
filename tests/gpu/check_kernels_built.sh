#!/usr/bin/env bash
# CTest: the kernels were compiled by every GPU compiler this machine has, for every target
# architecture (CUDA sm_80 + sm_90 in the static library; HIP gfx90a + gfx1030 in the object).
# Exit 77 (skipped) when the machine has neither compiler.
set -u
CUDA_LIB=$1 HIP_OBJ=$2 HAVE_CUDA=$3 HAVE_HIP=$4
status=77
if [ "$HAVE_CUDA" = ON ]; then
  for arch in sm_80 sm_90; do
    # Each embedded cubin records the ptxas options it was built with ("-arch sm_90 ...").
    if ! strings "$CUDA_LIB" | grep -q -- "-arch $arch "; then echo "FAIL: $CUDA_LIB has no $arch code"; exit 1; fi
  done
  echo "ok: nvcc compiled the kernels for sm_80 and sm_90 ($CUDA_LIB)"
  status=0
else
  echo "note: no nvcc on this machine: CUDA kernels not compiled"
fi
if [ "$HAVE_HIP" = ON ]; then
  for arch in gfx90a gfx1030; do
    if ! grep -aq "amdgcn-amd-amdhsa--$arch" "$HIP_OBJ"; then echo "FAIL: $HIP_OBJ has no $arch code"; exit 1; fi
  done
  echo "ok: hipcc compiled the kernels for gfx90a and gfx1030 ($HIP_OBJ)"
  status=0
else
  echo "note: no hipcc on this machine: HIP kernels not compiled"
fi
exit $status
