// The kernels' host interface: one launcher per kernel family, each defined in the file of
// its format beside its kernels (kernels_fp8.cu, kernels_mxfp4.cu, kernels_int8_shift.cu,
// kernels_ggml.cu, kernels_digest.cu), so a kernel and its launch geometry live together
// and the backend (backend_gpu.cu) and the benchmarks (gpu_bench.cu) time and run the same
// launch paths. Compiled by nvcc and hipcc only. Every launcher queues work on `stream` and
// returns at once; launch errors surface at the caller's gpuGetLastError.
#pragma once

#include <algorithm>
#include <cstdint>

#include "decode.h"
#include "verify/backend.h"

namespace ckpt::gpu {

using kern::DigestTables;
using kern::GgmlTables;

constexpr int kThreads = 256;             // threads per block of every kernel
constexpr uint32_t kBlocksPerSm = 8;      // 256-thread blocks resident per SM (2048 threads)
constexpr uint64_t k4G = uint64_t{1} << 32;

// A grid-stride grid of ceil(n / kThreads) blocks, at most 65535 * 8.
inline unsigned grid_for(uint64_t n) {
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>((n + kThreads - 1) / kThreads, 65535u * 8)));
}
// A grid of at most `sms` x kBlocksPerSm blocks (all resident at once) for `threads` threads.
inline unsigned resident_grid(uint64_t threads, unsigned sms) {
  const uint64_t blocks = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>(blocks, uint64_t{sms} * kBlocksPerSm)));
}

// FP8 block dequantization of n codes of rows from row_begin to BF16 (kernels_fp8.cu).
void launch_fp8(const uint8_t* w, uint64_t n, const Fp8Grid& g, uint64_t row_begin, Fp8ScaleKind kind,
                const void* scale, uint64_t scols, uint16_t* out, unsigned sms, gpuStream_t stream = 0);

// MXFP4 (safetensors experts): `words` 4-byte words of packed codes, one E8M0 scale per 4
// words, to f32 (kernels_mxfp4.cu).
void launch_mxfp4(const uint32_t* w, uint32_t words, const uint8_t* scale, float* out, gpuStream_t stream = 0);

// INT8-shift (kernels_int8_shift.cu): the tile decode to int8 rows, the activations'
// quantization, and the INT8 GEMM (tensor cores on CUDA cc >= 8 with `min_blocks` blocks
// per SM, 1 or 2; the portable dp4a kernel elsewhere).
void launch_decode(const uint32_t* tiles, uint64_t words, const uint8_t* shift2, uint64_t rows, uint64_t k, uint32_t* q,
                   gpuStream_t stream = 0);
void launch_quantize(const float* x, uint64_t m, uint64_t k, int8_t* a, float* a_scale, gpuStream_t stream = 0);
void launch_gemm(const int8_t* a, const float* as, const uint32_t* tiles, const uint8_t* shift2, const float* cs,
                 uint64_t m, uint64_t n, uint64_t k, int32_t* acc, uint16_t* out, int major, int min_blocks,
                 gpuStream_t stream = 0);

// ggml blocks of `type` to f32 (kernels_ggml.cu). Precondition: ggml_gpu_block(type).elems
// != 0, `blocks` 16-aligned and readable up to nblocks x block bytes rounded up to 16.
void launch_ggml(int32_t type, const uint8_t* blocks, uint64_t nblocks, const GgmlTables& t, float* out, unsigned sms,
                 gpuStream_t stream = 0);

// The verify digest (decode.h digest_terms) of n results, added into the two 64-bit sums at
// `out` (kernels_digest.cu). What each result's 32 bits are:
enum class DigestBits {
  f32,          // const float*: the f32's bits
  bf16,         // const uint16_t*: the BF16's bits
  f32_as_bf16,  // const float*: the f32 rounded to BF16 as convert rounds it
  word,         // const uint32_t*: four int8 results as their little-endian word
};
void launch_digest(DigestBits bits, const void* x, uint64_t n, const DigestTables& t, unsigned long long* out,
                   unsigned sms, gpuStream_t stream = 0);

}  // namespace ckpt::gpu
