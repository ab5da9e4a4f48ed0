// ggml block types on the GPU: the generic unit kernel (k_ggml), the per-type block kernels
// (k_ggml_t), ggml MXFP4's word-joined kernel and Q6_K's shared-memory tile kernel, and
// launch_ggml, which picks among them. Arithmetic: decode.h (ggml_decode_unit_as,
// q6k_values4; X86Arith for blocks whose scale is NaN or infinite).
#include "gpu_launch.h"

namespace ckpt::gpu {
namespace {

using namespace kern;

__global__ void k_ggml(int32_t type, const uint8_t* blocks, uint64_t units, uint32_t unit, uint32_t units_per_block,
                       uint32_t block_bytes, GgmlTables tables, float* out) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < units; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t b = i / units_per_block;
    float y[8];
    ggml_decode_unit(type, blocks + b * block_bytes, static_cast<unsigned>(i % units_per_block), y, tables);
    for (uint32_t j = 0; j < unit; ++j) out[i * unit + j] = y[j];
  }
}

// A unit of a block with a NaN or infinite scale, as the CPU reference computes it
// (decode.h X86Arith), stored straight to `o`. Out of line and writing global memory
// itself: were the fast path's y[] passed to a non-inlined call, it would live in local
// memory for every block, which made every block kernel 2-2.5x slower on an H200.
template <int32_t kType>
__device__ __noinline__ void ggml_unit_x86_to(const uint8_t* b, unsigned u, GgmlTables t, float4* o) {
  float y[8];
  ggml_decode_unit_as<X86Arith>(kType, b, u, y, t);
  o[0] = make_float4(y[0], y[1], y[2], y[3]);
  o[1] = make_float4(y[4], y[5], y[6], y[7]);
}

// The block types, specialized per type (the decode switch folds away), each thread one
// 8-element unit written as two 16-byte stores.
template <int32_t kType>
__global__ void k_ggml_t(const uint8_t* blocks, uint32_t units, GgmlTables tables, float4* out) {
  constexpr GgmlBlockShape s = ggml_gpu_block(kType);
  constexpr uint32_t per_block = s.elems / 8;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < units; i += gridDim.x * blockDim.x) {
    const uint8_t* b = blocks + static_cast<uint64_t>(i / per_block) * s.bytes;
    if (!ggml_block_scales_finite(kType, b)) {
      ggml_unit_x86_to<kType>(b, i % per_block, tables, out + 2 * i);
      continue;
    }
    float y[8];
    ggml_decode_unit_as<FiniteArith>(kType, b, i % per_block, y, tables);
    out[2 * i] = make_float4(y[0], y[1], y[2], y[3]);
    out[2 * i + 1] = make_float4(y[4], y[5], y[6], y[7]);
  }
}

// ggml MXFP4 (17-byte blocks, so no wider load is aligned): one 8-element unit per thread
// as k_ggml_t, its 8 code bytes read as two or three aligned words joined by funnel shifts
// instead of eight byte loads (0.94x a device copy on an H200, against 0.80x), decoded by
// decode.h's table and arithmetic. The words read lie within the buffer rounded up to 4
// bytes: each holds a byte of the unit. Precondition: `blocks` is 4-aligned.
__global__ void k_ggml_mxfp4(const uint8_t* blocks, uint32_t units, GgmlTables t, float4* out) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < units; i += gridDim.x * blockDim.x) {
    const uint64_t base = uint64_t(i / 4) * 17;
    const unsigned u = i % 4;
    const uint64_t at = base + 1 + (u & 1) * 8;
    const uint32_t* words = reinterpret_cast<const uint32_t*>(blocks + (at & ~uint64_t{3}));
    const uint32_t sh = 8 * static_cast<uint32_t>(at & 3);
    const uint32_t w0 = words[0], w1 = words[1], w2 = sh ? words[2] : 0u;
    const uint32_t lo = funnel_shift_r(w0, w1, sh), hi = funnel_shift_r(w1, w2, sh);
    const float d = exp2i(static_cast<int>(blocks[base]) - 128);
    const unsigned high = u >> 1;
    float y[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t byte = ((j < 4 ? lo : hi) >> (8 * (j & 3))) & 0xFFu;
      const unsigned nib = high ? (byte >> 4) : (byte & 0xF);
      y[j] = FiniteArith::mul(d, static_cast<float>(t.kvalues_fp4[nib]));
    }
    out[2 * i] = make_float4(y[0], y[1], y[2], y[3]);
    out[2 * i + 1] = make_float4(y[4], y[5], y[6], y[7]);
  }
}

// A tile of whole blocks staged through registers into shared memory with coalesced 16-byte
// loads, the next tile's loads in flight while this one decodes. The tile's first byte is
// 16-aligned. Precondition: the input buffer is 16-aligned and readable up to its size
// rounded up to 16 bytes (ggml_to_f32 allocates it so).
template <uint32_t kTileBytes>
struct Staged {
  static constexpr uint32_t kChunks = (kTileBytes + 15) / 16, kRounds = (kChunks + kThreads - 1) / kThreads;
  uint4 reg[kRounds];
  // Loads the 16-byte chunks [first_chunk, first_chunk + chunks) of `in` into registers.
  __device__ void load(const uint4* in, uint32_t first_chunk, uint32_t chunks) {
#pragma unroll
    for (uint32_t r = 0; r < kRounds; ++r) {
      const uint32_t c = threadIdx.x + r * kThreads;
      reg[r] = c < chunks ? in[first_chunk + c] : make_uint4(0, 0, 0, 0);
    }
  }
  __device__ void store(uint4* tile) const {
#pragma unroll
    for (uint32_t r = 0; r < kRounds; ++r) {
      const uint32_t c = threadIdx.x + r * kThreads;
      if (c < kChunks) tile[c] = reg[r];
    }
  }
};

// Q6_K (210 bytes, 2-aligned): 32 blocks per tile, one warp per block at a time. Lane L
// decodes elements 4L..4L+3 of each half, so each 16-byte store of a warp writes 512
// contiguous bytes; its ql and qh bytes are one word each (read at the block's 2-byte
// offset with a funnel shift), decoded four at a time by q6k_values4.
constexpr uint32_t kQ6Blocks = 32, kQ6Bytes = kQ6Blocks * 210;  // 6720 = 420 chunks

__device__ inline uint32_t word_at(const uint32_t* words, uint32_t byte) {
  return funnel_shift_r(words[byte / 4], words[byte / 4 + 1], 8 * (byte % 4));
}

// Four Q6_K values of a block whose scale d is not finite, as the reference computes them
// (dsc = d * sc, then dsc * (q - 32)), stored to `o`: out of line, as ggml_unit_x86_to.
__device__ __noinline__ void q6k_x86_to(uint32_t ql, uint32_t qh, unsigned quarter, float d, int8_t sc, float4* o) {
  float y[4];
  q6k_values4<X86Arith>(ql, qh, quarter, X86Arith::mul(d, static_cast<float>(sc)), y);
  *o = make_float4(y[0], y[1], y[2], y[3]);
}

__global__ void __launch_bounds__(kThreads) k_q6_k(const uint4* blocks, uint32_t nblocks, float4* out) {
  __shared__ uint4 tile[kQ6Bytes / 16];  // word_at's second word stays inside the block
  const auto* words = reinterpret_cast<const uint32_t*>(tile);
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, quarter = lane / 8, l0 = (lane % 8) * 4;
  const uint32_t tiles = (nblocks + kQ6Blocks - 1) / kQ6Blocks;
  auto chunks_of = [&](uint32_t t) { return (min(kQ6Blocks, nblocks - t * kQ6Blocks) * 210 + 15) / 16; };
  Staged<kQ6Bytes> next;
  if (blockIdx.x < tiles) next.load(blocks, blockIdx.x * (kQ6Bytes / 16), chunks_of(blockIdx.x));
  for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    __syncthreads();
    next.store(tile);
    __syncthreads();
    const uint32_t t2 = t + gridDim.x;
    if (t2 < tiles) next.load(blocks, t2 * (kQ6Bytes / 16), chunks_of(t2));
    const uint32_t nb = min(kQ6Blocks, nblocks - t * kQ6Blocks);
    for (uint32_t k = warp; k < nb; k += kThreads / 32) {
      const uint32_t b = k * 210, dword = words[(b + 208) / 4] >> (8 * ((b + 208) % 4));
      const float d = f16_to_f32(static_cast<uint16_t>(dword));
      const bool finite = f16_is_finite(static_cast<uint16_t>(dword));  // the whole warp's block: no divergence
#pragma unroll
      for (uint32_t half = 0; half < 2; ++half) {
        const uint32_t ql = word_at(words, b + 64 * half + 32 * (quarter & 1) + l0);
        const uint32_t qh = word_at(words, b + 128 + 32 * half + l0);
        const uint32_t sc_at = b + 192 + 8 * half + l0 / 16 + 2 * quarter;
        const int8_t sc = static_cast<int8_t>(words[sc_at / 4] >> (8 * (sc_at % 4)));
        float4* dst = out + (t * kQ6Blocks + k) * 64 + half * 32 + lane;
        if (!finite) {
          q6k_x86_to(ql, qh, quarter, d, sc, dst);  // NaN / inf scale: the reference's bits (decode.h)
          continue;
        }
        float y[4];
        q6k_values4(ql, qh, quarter, mul_rn(d, static_cast<float>(sc)), y);
        *dst = make_float4(y[0], y[1], y[2], y[3]);
      }
    }
  }
}

// Launches the block kernel of `type`; false for plain and unknown types and sizes past
// the 32-bit indices. (Staging through shared memory as k_q6_k does made the other types
// slower on an H200: they stay on k_ggml_t; docs/notes/h-kernels.md has the numbers.)
bool launch_ggml_blocks(int32_t type, const uint8_t* blocks, uint64_t nblocks, const GgmlTables& t, float* out,
                        unsigned sms, gpuStream_t stream) {
  const GgmlBlockShape shape = ggml_gpu_block(type);
  const uint64_t units = nblocks * (shape.elems / 8);
  if (units >= (uint64_t{1} << 31)) return false;
  auto* o = reinterpret_cast<float4*>(out);
  const uint32_t u = static_cast<uint32_t>(units);
  const unsigned grid = grid_for(units);
  switch (type) {
    case kQ4_0: k_ggml_t<kQ4_0><<<grid, kThreads, 0, stream>>>(blocks, u, t, o); return true;
    case kQ8_0: k_ggml_t<kQ8_0><<<grid, kThreads, 0, stream>>>(blocks, u, t, o); return true;
    case kIQ4_NL: k_ggml_t<kIQ4_NL><<<grid, kThreads, 0, stream>>>(blocks, u, t, o); return true;
    case kMXFP4:
      if (reinterpret_cast<uintptr_t>(blocks) % 4 != 0) return false;
      k_ggml_mxfp4<<<grid, kThreads, 0, stream>>>(blocks, u, t, o);
      return true;
    case kQ4_K: k_ggml_t<kQ4_K><<<grid, kThreads, 0, stream>>>(blocks, u, t, o); return true;
    case kIQ3_XXS: k_ggml_t<kIQ3_XXS><<<grid, kThreads, 0, stream>>>(blocks, u, t, o); return true;
    case kIQ3_S: k_ggml_t<kIQ3_S><<<grid, kThreads, 0, stream>>>(blocks, u, t, o); return true;
    case kIQ2_S: k_ggml_t<kIQ2_S><<<grid, kThreads, 0, stream>>>(blocks, u, t, o); return true;
    case kQ6_K:
      if (reinterpret_cast<uintptr_t>(blocks) % 16 != 0) return false;
      k_q6_k<<<resident_grid(uint64_t{(static_cast<uint32_t>(nblocks) + kQ6Blocks - 1) / kQ6Blocks} * kThreads, sms),
               kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(blocks), static_cast<uint32_t>(nblocks), o);
      return true;
    default: return false;
  }
}

}  // namespace

void launch_ggml(int32_t type, const uint8_t* blocks, uint64_t nblocks, const GgmlTables& t, float* out, unsigned sms,
                 gpuStream_t stream) {
  const GgmlBlockShape shape = ggml_gpu_block(type);
  const uint32_t unit = ggml_gpu_unit(type), per_block = shape.elems / unit;
  if (unit == 8 && launch_ggml_blocks(type, blocks, nblocks, t, out, sms, stream)) return;
  const uint64_t units = nblocks * per_block;
  k_ggml<<<grid_for(units), kThreads, 0, stream>>>(type, blocks, units, unit, per_block, shape.bytes, t, out);
}

}  // namespace ckpt::gpu
