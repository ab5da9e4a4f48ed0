// The CUDA/HIP kernels and the DecodeBackend that drives them. Single source: nvcc
// compiles it as CUDA, hipcc as HIP (-x hip); everything vendor-specific is in
// gpu_compat.h. Built with FMA contraction off (-fmad=false / -ffp-contract=off) so the
// decode arithmetic of decode.h rounds exactly as the CPU reference does.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "decode.h"
#include "gpu_bench.h"
#include "numerics/ggml_tables.h"
#include "verify/backend.h"
#include "verify/opening_backend.h"

namespace ckpt {
namespace {

using namespace kern;

constexpr int kThreads = 256;

// ---- kernels -------------------------------------------------------------------------

__global__ void k_fp8_e8m0(const uint8_t* w, uint64_t n, uint64_t cols, uint64_t row_begin, uint64_t br,
                           uint64_t bc, const uint8_t* scale, uint64_t scols, uint16_t* out) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t row = row_begin + i / cols, col = i % cols;
    out[i] = fp8_e8m0_to_bf16(w[i], scale[(row / br) * scols + col / bc]);
  }
}

// The FP8 block dequant at copy speed: every thread handles kFp8Groups 8-code groups per
// round, a warp's groups contiguous (each load instruction reads 256 bytes, each store
// writes 512), the grid sized to the SMs and striding over the tensor. An 8-group never
// crosses a row or a scale block (the launcher requires cols and the block width to be
// multiples of 8), so its scale is read once; indices are 32-bit with FastDiv divisions.
// The arithmetic is decode.h's fp8_group8_to_bf16: a few instructions per code where the
// element functions take ~25, which bound the old kernels at half of copy speed.
constexpr uint32_t kFp8Groups = 4;
constexpr uint32_t kBlocksPerSm = 8;  // 256-thread blocks resident per SM (2048 threads)

// A grid-stride grid of ceil(n / kThreads) blocks, at most 65535 * 8.
unsigned grid_for(uint64_t n) { return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>((n + kThreads - 1) / kThreads, 65535u * 8))); }

// A grid of at most `sms` x kBlocksPerSm blocks (all resident at once) for `threads` threads.
unsigned resident_grid(uint64_t threads, unsigned sms) {
  const uint64_t blocks = (threads + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>(blocks, uint64_t{sms} * kBlocksPerSm)));
}

struct Fp8Index {
  FastDiv cols8, block_rows, block_cols8;
  uint32_t row_begin, scols;
  __device__ uint32_t scale_of(uint32_t group) const {
    const uint32_t row = cols8.div(group), c8 = group - row * cols8.d;
    return block_rows.div(row_begin + row) * scols + block_cols8.div(c8);
  }
};

template <class Scale>
__global__ void __launch_bounds__(kThreads) k_fp8_x8(const uint2* w, uint32_t groups, Fp8Index ix,
                                                     const Scale* scale, uint4* out) {
  const uint32_t lane = threadIdx.x % 32, stride = gridDim.x * blockDim.x * kFp8Groups;
  for (uint32_t base = (blockIdx.x * blockDim.x + threadIdx.x - lane) * kFp8Groups; base < groups; base += stride) {
    uint2 codes[kFp8Groups];
    Scale sc[kFp8Groups];
#pragma unroll
    for (uint32_t j = 0; j < kFp8Groups; ++j) {  // every load issued before the first use
      const uint32_t g = base + 32 * j + lane;
      codes[j] = g < groups ? w[g] : make_uint2(0, 0);
      sc[j] = g < groups ? scale[ix.scale_of(g)] : Scale{};
    }
#pragma unroll
    for (uint32_t j = 0; j < kFp8Groups; ++j) {
      const uint32_t g = base + 32 * j + lane;
      if (g >= groups) break;
      const Bf16x8 bf = fp8_group8_to_bf16(codes[j].x, codes[j].y, sc[j]);
      out[g] = make_uint4(bf.w[0], bf.w[1], bf.w[2], bf.w[3]);
    }
  }
}

__global__ void k_fp8_f32(const uint8_t* w, uint64_t n, uint64_t cols, uint64_t row_begin, uint64_t br,
                          uint64_t bc, const float* scale, uint64_t scols, uint16_t* out) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t row = row_begin + i / cols, col = i % cols;
    out[i] = fp8_f32_to_bf16(w[i], scale[(row / br) * scols + col / bc]);
  }
}

// Four packed bytes (8 elements, one scale: 16 bytes share it) per thread.
__global__ void k_mxfp4(const uint32_t* w, uint32_t words, const uint8_t* scale, float4* out) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x) {
    const uint8_t s = scale[i / 4];
    const uint32_t v = w[i];
    out[2 * i] = make_float4(mxfp4_to_f32(v & 0xF, s), mxfp4_to_f32((v >> 4) & 0xF, s), mxfp4_to_f32((v >> 8) & 0xF, s),
                             mxfp4_to_f32((v >> 12) & 0xF, s));
    out[2 * i + 1] = make_float4(mxfp4_to_f32((v >> 16) & 0xF, s), mxfp4_to_f32((v >> 20) & 0xF, s),
                                 mxfp4_to_f32((v >> 24) & 0xF, s), mxfp4_to_f32(v >> 28, s));
  }
}

// INT8-shift decode: a block is 8 row groups (64 rows) x 4 consecutive 32-blocks; warp w
// is group g0 + w, lane l its row l / 4 and 32-block kb0 + l % 4. Each 32-block's tile is read
// by 8 lanes as 128 contiguous bytes, so a warp reads 4 tiles (the tiles of one group lie
// G x 128 bytes apart: 2 MiB in a 131072-row matrix, one page each); each row's 4 x 32 decoded
// bytes are one 128-byte line. Blocks run along the groups' 32-blocks first.
// (On an H200: 0.85x a device copy, per expert and for one tall matrix alike; the previous
// layout, a warp per row reading 32 tiles for 1 KiB of its row, 0.81x and 0.78x; that layout
// staged through shared memory 0.68x; a lane per tile word with 4-byte stores 0.64x.)
__global__ void __launch_bounds__(kThreads) k_decode_int8_shift(const uint4* tiles, uint32_t kbs, uint32_t groups,
                                                                const uint8_t* shift2, uint32_t rows, uint32_t k, uint4* q) {
  static_assert(kThreads == 256, "one warp per row group of a block's eight");
  const uint32_t w = threadIdx.x / 32, lane = threadIdx.x % 32, r = lane / 4, kq = lane % 4;
  const uint32_t kb_runs = (kbs + 3) / 4, g_runs = (groups + 7) / 8;
  for (uint64_t bi = blockIdx.x; bi < uint64_t(g_runs) * kb_runs; bi += gridDim.x) {
    const uint32_t kb = static_cast<uint32_t>(bi % kb_runs) * 4 + kq, g = static_cast<uint32_t>(bi / kb_runs) * 8 + w;
    const uint32_t n = g * 8 + r;
    if (g >= groups || kb >= kbs || n >= rows) continue;
    const uint4 t = tiles[(uint64_t(kb) * groups + g) * 8 + r];
    const unsigned shift = (shift2[((kb >> 2) * uint64_t(groups) + g) * 8 + r] >> (2 * (kb & 3))) & 3u;
    const Int8x8 v0 = decode_int8_shift_word(t.x, shift), v1 = decode_int8_shift_word(t.y, shift),
                 v2 = decode_int8_shift_word(t.z, shift), v3 = decode_int8_shift_word(t.w, shift);
    uint4* row = q + (uint64_t(n) * k + uint64_t(kb) * 32) / 16;
    row[0] = make_uint4(v0.lo, v1.lo, v2.lo, v3.lo);
    row[1] = make_uint4(v0.hi, v1.hi, v2.hi, v3.hi);
  }
}

// One block per row: max |x| (fmaxf skips NaN), scale = max / 127 (1 for a zero row),
// q = clamp(rne(x / scale), -127, 127); cvt.rni of NaN is 0.
__global__ void k_quantize(const float* x, uint64_t k, int8_t* a, float* a_scale) {
  __shared__ float partial[kThreads];
  const float* row = x + blockIdx.x * k;
  float amax = 0;
  for (uint64_t c = threadIdx.x; c < k; c += blockDim.x) amax = fmaxf(amax, fabsf(row[c]));
  partial[threadIdx.x] = amax;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (int(threadIdx.x) < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
    __syncthreads();
  }
  const float scale = partial[0] == 0 ? 1.0f : div_rn(partial[0], 127.0f);
  if (threadIdx.x == 0) a_scale[blockIdx.x] = scale;
  for (uint64_t c = threadIdx.x; c < k; c += blockDim.x) {
    const int v = __float2int_rn(div_rn(row[c], scale));
    a[blockIdx.x * k + c] = static_cast<int8_t>(v < -127 ? -127 : (v > 127 ? 127 : v));
  }
}

// Rows of k <= 8192 floats (k % 4 == 0) held in registers: one read of x, a warp-shuffle
// max, then the quantized row written as packed int8x4.
constexpr int kQuantVec = 8;  // float4 per thread: 256 threads x 8 x 4 = 8192
__global__ void k_quantize_reg(const float4* x, uint32_t k4, int8_t* a, float* a_scale) {
  __shared__ float warp_max[kThreads / 32];
  const float4* row = x + static_cast<uint64_t>(blockIdx.x) * k4;
  float4 v[kQuantVec];
  float amax = 0;
#pragma unroll
  for (int j = 0; j < kQuantVec; ++j) {
    const uint32_t idx = threadIdx.x + j * kThreads;
    v[j] = idx < k4 ? row[idx] : make_float4(0, 0, 0, 0);
    amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w))));
  }
  amax = max_over_32_lanes(amax);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = warp_max[0];
  for (int w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  const float scale = amax == 0 ? 1.0f : div_rn(amax, 127.0f);
  if (threadIdx.x == 0) a_scale[blockIdx.x] = scale;
  uint32_t* out = reinterpret_cast<uint32_t*>(a + static_cast<uint64_t>(blockIdx.x) * k4 * 4);
#pragma unroll
  for (int j = 0; j < kQuantVec; ++j) {
    const uint32_t idx = threadIdx.x + j * kThreads;
    if (idx >= k4) continue;
    const float e[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
    uint32_t packed = 0;
    for (int c = 0; c < 4; ++c) {
      const int q = __float2int_rn(div_rn(e[c], scale));
      packed |= (static_cast<uint32_t>(q < -127 ? -127 : (q > 127 ? 127 : q)) & 0xFFu) << (8 * c);
    }
    out[idx] = packed;
  }
}

__device__ inline void store_result(uint64_t r, uint64_t c, int32_t acc, const float* a_scale, const float* cs,
                                    uint64_t n, int32_t* acc_out, uint16_t* out) {
  if (acc_out) acc_out[r * n + c] = acc;
  out[r * n + c] = f32_to_bf16_rne(mul_rn(mul_rn(static_cast<float>(acc), a_scale[r]), cs[c]));
}

// Portable INT8 GEMM (HIP, and NVIDIA parts without the s8 MMA): one thread per output,
// weights decoded word by word from the tile layout, dp4a accumulation.
__global__ void k_gemm_generic(const int8_t* a, const float* a_scale, const uint32_t* tiles, const uint8_t* shift2,
                               const float* cs, uint64_t m, uint64_t n, uint64_t k, int32_t* acc_out, uint16_t* out) {
  const uint64_t c = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x, r = blockIdx.y;
  if (c >= n || r >= m) return;
  const uint64_t groups = (n + 7) / 8, ng = c / 8, row8 = c % 8;
  const uint32_t* arow = reinterpret_cast<const uint32_t*>(a + r * k);
  int32_t acc = 0;
  for (uint64_t kb = 0; kb < k / 32; ++kb) {
    const unsigned shift = int8_shift_of(shift2, groups, c, kb);
    for (unsigned tid = 0; tid < 4; ++tid) {
      const Int8x8 v = decode_int8_shift_word(tiles[(kb * groups + ng) * 32 + row8 * 4 + tid], shift);
      acc = dot4_i8(arow[kb * 8 + tid], v.lo, acc);
      acc = dot4_i8(arow[kb * 8 + 4 + tid], v.hi, acc);
    }
  }
  store_result(r, c, acc, a_scale, cs, n, acc_out, out);
}

#if defined(__CUDACC__)
// Tensor-core INT8 GEMM (sm_80+): block tile 128 (M) x 128 (N), 8 warps as 2 x 4, warp tile
// 64 x 32 = 4 x 4 mma.sync.m16n8k32 per 32-block. A lane's word of an mxfp4 tile IS its B
// fragment (spec §4), decoded in registers. K advances in stages of four 32-blocks: the A
// tile of a stage goes through shared memory (double buffered, rows padded to 144 bytes so
// fragment loads are conflict-free) and the next stage's A and B words are loaded into
// registers while the current stage computes.
constexpr int kBM = 128, kBN = 128, kStageKb = 4, kARow = kStageKb * 32 + 16;

__device__ inline void mma_s8(int32_t (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if CKPT_HAS_MMA_S8
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)c, (void)a, (void)b0, (void)b1;
#endif
}

struct GemmStage {
  uint4 a[4];        // this thread's 4 x 16 bytes of the A tile
  uint32_t b[4][4];  // [n8 tile][32-block] B words of this lane
  uint32_t shift[4]; // [n8 tile] the shift2 byte of this lane's row (4 blocks x 2 bits)
};

__device__ inline void load_stage(GemmStage& st, uint32_t stage, const int8_t* a, const uint32_t* tiles,
                                  const uint8_t* shift2, uint32_t m, uint32_t n, uint32_t k, uint32_t m0, uint32_t n0,
                                  int wn, int lane) {
  const uint32_t kbs = k / 32, groups = (n + 7) / 8, c16 = threadIdx.x % 8;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t row = i * 32 + threadIdx.x / 8, kbyte = stage * 128 + c16 * 16;
    st.a[i] = make_uint4(0, 0, 0, 0);
    if (m0 + row < m && kbyte < k) st.a[i] = *reinterpret_cast<const uint4*>(a + uint64_t(m0 + row) * k + kbyte);
  }
#pragma unroll
  for (int ni = 0; ni < 4; ++ni) {
    const uint32_t ng = (n0 + wn * 32 + ni * 8) / 8;
    st.shift[ni] = ng < groups ? shift2[(uint64_t(stage) * groups + ng) * 8 + lane / 4] : 0u;
#pragma unroll
    for (int j = 0; j < kStageKb; ++j) {
      const uint32_t kb = stage * kStageKb + j;
      st.b[ni][j] = (ng < groups && kb < kbs) ? tiles[(uint64_t(kb) * groups + ng) * 32 + lane] : 0u;
    }
  }
}

template <int kMinBlocks>
__global__ void __launch_bounds__(256, kMinBlocks) k_gemm_mma(const int8_t* a, const float* a_scale, const uint32_t* tiles,
                                                  const uint8_t* shift2, const float* cs, uint32_t m, uint32_t n,
                                                  uint32_t k, int32_t* acc_out, uint16_t* out) {
  __shared__ __align__(16) uint8_t sa[2][kBM * kARow];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wm = warp / 4, wn = warp % 4;  // warp tile origin: rows 64*wm, cols 32*wn
  const uint32_t m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN, kbs = k / 32, stages = (kbs + kStageKb - 1) / kStageKb;
  int32_t acc[4][4][4] = {};
  GemmStage next;
  load_stage(next, 0, a, tiles, shift2, m, n, k, m0, n0, wn, lane);
  for (uint32_t stage = 0; stage < stages; ++stage) {
    uint8_t* buf = sa[stage & 1];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      *reinterpret_cast<uint4*>(buf + (i * 32 + threadIdx.x / 8) * kARow + (threadIdx.x % 8) * 16) = next.a[i];
    const GemmStage cur = next;
    __syncthreads();
    if (stage + 1 < stages) load_stage(next, stage + 1, a, tiles, shift2, m, n, k, m0, n0, wn, lane);
#pragma unroll
    for (int j = 0; j < kStageKb; ++j) {
      if (stage * kStageKb + j >= kbs) break;
      uint32_t bfrag[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const Int8x8 v = decode_int8_shift_word(cur.b[ni][j], (cur.shift[ni] >> (2 * j)) & 3u);
        bfrag[ni][0] = v.lo;
        bfrag[ni][1] = v.hi;
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const uint8_t* base = buf + (wm * 64 + mi * 16 + g) * kARow + j * 32 + t * 4;
        const uint32_t af[4] = {*reinterpret_cast<const uint32_t*>(base),
                                *reinterpret_cast<const uint32_t*>(base + 8 * kARow),
                                *reinterpret_cast<const uint32_t*>(base + 16),
                                *reinterpret_cast<const uint32_t*>(base + 8 * kARow + 16)};
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) mma_s8(acc[mi][ni], af, bfrag[ni][0], bfrag[ni][1]);
      }
    }
  }
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const uint64_t r0 = m0 + wm * 64 + mi * 16 + g, c0 = n0 + wn * 32 + ni * 8 + t * 2;
      for (int h = 0; h < 2; ++h) {
        const uint64_t r = r0 + 8 * h;
        if (r >= m) continue;
        if (c0 < n) store_result(r, c0, acc[mi][ni][2 * h], a_scale, cs, n, acc_out, out);
        if (c0 + 1 < n) store_result(r, c0 + 1, acc[mi][ni][2 * h + 1], a_scale, cs, n, acc_out, out);
      }
    }
  }
}
#endif

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

// ---- host side -----------------------------------------------------------------------


constexpr uint64_t k4G = uint64_t{1} << 32;

// The launch paths, shared by the backend and the benchmarks so both time the same code.
void launch_fp8(const uint8_t* w, uint64_t n, const Fp8Grid& g, uint64_t row_begin, Fp8ScaleKind kind,
                const void* scale, uint64_t scols, uint16_t* out, unsigned sms, gpuStream_t stream = 0) {
  constexpr uint64_t k2G = uint64_t{1} << 31;  // FastDiv's range
  const bool fits = n / 8 < k2G && g.rows < k2G && g.block_rows < k2G && g.cols < k2G &&
                    scols * fp8_scale_rows(g) < k4G;
  if (fits && g.cols % 8 == 0 && g.block_cols % 8 == 0) {
    const uint32_t groups = static_cast<uint32_t>(n / 8);
    const Fp8Index ix{FastDiv(static_cast<uint32_t>(g.cols / 8)), FastDiv(static_cast<uint32_t>(g.block_rows)),
                      FastDiv(static_cast<uint32_t>(g.block_cols / 8)), static_cast<uint32_t>(row_begin),
                      static_cast<uint32_t>(scols)};
    const unsigned grid = resident_grid((uint64_t{groups} + kFp8Groups - 1) / kFp8Groups, sms);
    auto* w8 = reinterpret_cast<const uint2*>(w);
    auto* o8 = reinterpret_cast<uint4*>(out);
    if (kind == Fp8ScaleKind::e8m0) {
      k_fp8_x8<<<grid, kThreads, 0, stream>>>(w8, groups, ix, static_cast<const uint8_t*>(scale), o8);
    } else {
      k_fp8_x8<<<grid, kThreads, 0, stream>>>(w8, groups, ix, static_cast<const float*>(scale), o8);
    }
  } else if (kind == Fp8ScaleKind::e8m0) {
    k_fp8_e8m0<<<grid_for(n), kThreads, 0, stream>>>(w, n, g.cols, row_begin, g.block_rows, g.block_cols,
                                          static_cast<const uint8_t*>(scale), scols, out);
  } else {
    k_fp8_f32<<<grid_for(n), kThreads, 0, stream>>>(w, n, g.cols, row_begin, g.block_rows, g.block_cols,
                                         static_cast<const float*>(scale), scols, out);
  }
}

// The INT8-shift decode (k_decode_int8_shift). Measured before it on an H200 (docs/notes/
// h-gpu.md): a one-row-per-lane variant 0.19x of a device copy, a warp-shuffle store
// transpose 0.52, the lane-per-word layout 0.64.
void launch_decode(const uint32_t* tiles, uint64_t words, const uint8_t* shift2, uint64_t rows, uint64_t k, uint32_t* q,
                   gpuStream_t stream = 0) {
  const uint32_t groups = static_cast<uint32_t>((rows + 7) / 8), kbs = static_cast<uint32_t>(k / 32);
  (void)words;  // = kbs * groups * 32
  const uint64_t blocks = uint64_t{(groups + 7) / 8} * ((kbs + 3) / 4);
  k_decode_int8_shift<<<static_cast<unsigned>(std::min<uint64_t>(blocks, 65535u * 16)), kThreads, 0, stream>>>(
      reinterpret_cast<const uint4*>(tiles), kbs, groups, shift2, static_cast<uint32_t>(rows), static_cast<uint32_t>(k),
      reinterpret_cast<uint4*>(q));
}

void launch_quantize(const float* x, uint64_t m, uint64_t k, int8_t* a, float* a_scale, gpuStream_t stream = 0) {
  if (k % 4 == 0 && k <= uint64_t{kThreads} * kQuantVec * 4) {
    k_quantize_reg<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                           static_cast<uint32_t>(k / 4), a, a_scale);
  } else {
    k_quantize<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, k, a, a_scale);
  }
}

void launch_ggml(int32_t type, const uint8_t* blocks, uint64_t nblocks, const GgmlTables& t, float* out, unsigned sms,
                 gpuStream_t stream = 0) {
  const GgmlBlockShape shape = ggml_gpu_block(type);
  const uint32_t unit = ggml_gpu_unit(type), per_block = shape.elems / unit;
  if (unit == 8 && launch_ggml_blocks(type, blocks, nblocks, t, out, sms, stream)) return;
  const uint64_t units = nblocks * per_block;
  k_ggml<<<grid_for(units), kThreads, 0, stream>>>(type, blocks, units, unit, per_block, shape.bytes, t, out);
}

// The verify digest of n f32 results (decode.h digest_terms): a sum per thread, the
// block's sums added in shared memory, one atomic add per block and sum. Addition mod 2^64
// is order-free, so the result is the CPU's bit for bit whatever the grid.
// The bits each digest kernel sums: an f32 result's, a BF16 result's, an f32 result's
// rounded to BF16 as convert rounds it (f32_to_bf16_rne, the CPU's bf16_from_float_rne).
struct F32Bits {
  __device__ uint32_t operator()(float x) const { return float_to_bits(x); }
};
struct Bf16Bits {
  __device__ uint32_t operator()(uint16_t x) const { return x; }
};
struct F32AsBf16Bits {
  __device__ uint32_t operator()(float x) const { return f32_to_bf16_rne(x); }
};
// Four int8 results as their little-endian word (int8_digest).
struct WordBits {
  __device__ uint32_t operator()(uint32_t x) const { return x; }
};

template <class T, class Bits>
__global__ void k_digest(const T* x, uint64_t n, DigestTables t, unsigned long long* out) {
  __shared__ unsigned long long sum_a[kThreads], sum_b[kThreads];
  uint64_t a = 0, b = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
    const DigestTerms d = digest_terms(Bits()(x[i]), i, t);
    a += d.a;
    b += d.b;
  }
  sum_a[threadIdx.x] = a;
  sum_b[threadIdx.x] = b;
  __syncthreads();
  for (unsigned half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sum_a[threadIdx.x] += sum_a[threadIdx.x + half];
      sum_b[threadIdx.x] += sum_b[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(out, sum_a[0]);
    atomicAdd(out + 1, sum_b[0]);
  }
}

// A grow-only device buffer; the driver's chunking bounds its size.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  void* get(uint64_t bytes, std::string& error) {
    if (bytes <= size_ && ptr_) return ptr_;
    release();
    const gpuError_t e = gpuMalloc(&ptr_, std::max<uint64_t>(bytes, 256));
    if (e != gpuSuccess) {
      ptr_ = nullptr;
      error = std::string("device allocation of ") + std::to_string(bytes) + " bytes failed: " + gpuGetErrorString(e);
      return nullptr;
    }
    size_ = std::max<uint64_t>(bytes, 256);
    return ptr_;
  }
  void release() {
    if (ptr_) (void)gpuFree(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }

 private:
  void* ptr_ = nullptr;
  uint64_t size_ = 0;
};

bool check(gpuError_t e, const char* what, std::string& error) {
  if (e == gpuSuccess) return true;
  error = std::string(what) + ": " + gpuGetErrorString(e);
  return false;
}

// Page-locked host memory of a fixed size (the DMA engines read and write it directly, so
// copies from it are asynchronous). Empty when the allocation failed: its lane then copies
// from and to the caller's pageable memory (correct, synchronous, slower).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) (void)gpuFreeHost(ptr_);
  }
  void allocate(uint64_t bytes) {
    void* p = nullptr;
    if (gpuMallocHost(&p, bytes) == gpuSuccess) {
      ptr_ = static_cast<uint8_t*>(p);
      size_ = bytes;
    } else {
      (void)gpuGetLastError();  // not sticky: clear it so the next call does not report it
    }
  }
  uint8_t* data() const { return ptr_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t* ptr_ = nullptr;
  uint64_t size_ = 0;
};

// Lanes: one call of the backend runs on one lane from start to end, so calls from several
// threads overlap (concurrent() is true): each lane has its own stream, its own pinned
// staging buffers (kStageIn for the inputs, kStageOut for the outputs) and its own device
// buffers. A call copies its inputs into the pinned buffer, queues the H2D copies, the
// kernel and the D2H copies on the lane's stream, waits for that stream alone and copies
// the results out. Inputs or outputs larger than the staging buffers are copied from or to
// the caller's memory directly (pageable: correct, synchronous). At most kLanes lanes exist
// (made on first need), so the pinned host memory is at most kLanes x (kStageIn +
// kStageOut) = host_memory(); device memory is kLanes x the largest call's buffers. The
// output staging is pinned at a lane's first result larger than kSmallResult, not when the
// lane is made: a digest run brings back 16 bytes per call and never needs it, and pinning
// costs the device's open about 0.4 ms per MiB (H200 host: 128 MiB in 45-70 ms).
constexpr unsigned kLanes = 4;
constexpr uint64_t kStageIn = uint64_t{16} << 20, kStageOut = uint64_t{16} << 20, kSmallResult = 4096;
// Inputs are staged and queued in slices of this size: the DMA engine copies one slice to the
// device while the host stages the next (a call's copies overlap its own staging).
constexpr uint64_t kStageSlice = uint64_t{2} << 20;
// What the backend answers before and after it opens (OpeningBackend plans with it).
constexpr BackendTraits kGpuTraits{kStageIn, uint64_t{kLanes} * (kStageIn + kStageOut), true, true, true, true};

struct Lane {
  gpuStream_t stream{};
  PinnedBuffer host_in, host_out;
  DeviceBuffer in, aux, out;
  // This call's use of the staging buffers and the pinned results still to copy out.
  uint64_t in_used = 0, out_used = 0;
  bool out_pinning_tried = false;
  struct Pending {
    void* dst;
    const uint8_t* src;
    uint64_t bytes;
  };
  std::vector<Pending> pending;

  static uint64_t align(uint64_t x) { return (x + 255) / 256 * 256; }

  void begin() {
    in_used = out_used = 0;
    pending.clear();
  }
  // Queues the copy of `bytes` host bytes to device address `dst`, staged slice by slice
  // (kStageSlice) where they fit the pinned buffer, each slice's copy queued once it is staged.
  bool put(void* dst, const void* src, uint64_t bytes, std::string& error) {
    if (bytes == 0) return true;
    if (!host_in.data() || in_used + bytes > host_in.size())
      return check(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, stream), "copy to device", error);
    uint8_t* staged = host_in.data() + in_used;
    in_used += align(bytes);
    for (uint64_t off = 0; off < bytes; off += kStageSlice) {
      const uint64_t n = std::min(kStageSlice, bytes - off);
      std::memcpy(staged + off, static_cast<const uint8_t*>(src) + off, n);
      if (!check(gpuMemcpyAsync(static_cast<uint8_t*>(dst) + off, staged + off, n, gpuMemcpyHostToDevice, stream),
                 "copy to device", error))
        return false;
    }
    return true;
  }
  // Queues the copy of `bytes` device bytes at `src` to host memory `dst` (complete after finish()).
  bool get(void* dst, const void* src, uint64_t bytes, std::string& error) {
    if (bytes == 0) return true;
    if (bytes > kSmallResult && !out_pinning_tried) {
      out_pinning_tried = true;
      host_out.allocate(kStageOut);
    }
    if (host_out.data() && out_used + bytes <= host_out.size()) {
      uint8_t* staged = host_out.data() + out_used;
      out_used += align(bytes);
      pending.push_back({dst, staged, bytes});
      return check(gpuMemcpyAsync(staged, src, bytes, gpuMemcpyDeviceToHost, stream), "copy back", error);
    }
    return check(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToHost, stream), "copy back", error);
  }
  // After the kernel launch: its launch error, then the stream's completion, then the
  // staged results copied out.
  bool finish(const char* what, std::string& error) {
    if (!check(gpuGetLastError(), what, error) || !check(gpuStreamSynchronize(stream), what, error)) return false;
    for (const Pending& p : pending) std::memcpy(p.dst, p.src, p.bytes);
    pending.clear();
    return true;
  }
};

class LanePool {
 public:
  ~LanePool() {
    for (auto& l : lanes_)
      if (l->stream) (void)gpuStreamDestroy(l->stream);
  }
  // Every lane made now (on the opening thread), so that its stream and pinned staging do
  // not delay the first calls.
  bool prewarm(std::string& error) {
    std::vector<Lane*> made;
    for (unsigned i = 0; i < kLanes; ++i) {
      Lane* l = acquire(error);
      if (!l) break;
      made.push_back(l);
    }
    for (Lane* l : made) release(l);
    return made.size() == kLanes;
  }
  // A free lane (a new one while fewer than kLanes exist), waiting for one otherwise.
  Lane* acquire(std::string& error) {
    std::unique_lock<std::mutex> lock(mu_);
    while (free_.empty() && lanes_.size() >= kLanes) cv_.wait(lock);
    if (!free_.empty()) {
      Lane* l = free_.back();
      free_.pop_back();
      return l;
    }
    auto lane = std::make_unique<Lane>();
    if (!check(gpuStreamCreateNonBlocking(&lane->stream), "cannot create a stream", error)) return nullptr;
    lane->host_in.allocate(kStageIn);  // host_out: at the lane's first large result (Lane::get)
    lanes_.push_back(std::move(lane));
    return lanes_.back().get();
  }
  void release(Lane* l) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(l);
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::vector<Lane*> free_;
};

class GpuBackend final : public DecodeBackend {
 public:
  bool open(int ordinal, std::string& error) {
    int count = 0;
    if (!check(gpuGetDeviceCount(&count), "cannot start the GPU runtime", error)) return false;
    if (ordinal < 0 || ordinal >= count) {
      error = "device " + std::to_string(ordinal) + " not present (" + std::to_string(count) + " device(s))";
      return false;
    }
    ordinal_ = ordinal;
    if (!check(gpuSetDevice(ordinal), "cannot select the device", error)) return false;
    gpuDeviceProp prop;
    if (!check(gpuGetDeviceProperties(&prop, ordinal), "cannot query the device", error)) return false;
    major_ = prop.major;
    sms_ = static_cast<unsigned>(std::max(1, prop.multiProcessorCount));
    name_ = std::string(CKPT_GPU_BACKEND) + ": " + prop.name + " (cc " + std::to_string(prop.major) + "." +
            std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
    return upload_tables(error) && lanes_.prewarm(error);
  }

  std::string name() const override { return name_; }
  uint64_t max_chunk_bytes() const override { return kGpuTraits.max_chunk_bytes; }
  bool concurrent() const override { return kGpuTraits.concurrent; }  // one call per lane (LanePool)
  uint64_t host_memory() const override { return kGpuTraits.host_memory; }

  bool fp8_to_bf16(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                   std::span<const uint8_t> scale, std::span<uint16_t> out, std::string& error) override {
    if (!backend_args::fp8_ok(w.size(), row_begin, g, kind, scale.size(), out.size())) return bad(error, "fp8_to_bf16");
    const uint64_t scols = fp8_scale_cols(g);
    return on_lane(error, [&](Lane& l) {
      auto* dw = static_cast<uint8_t*>(l.in.get(w.size(), error));
      auto* ds = static_cast<uint8_t*>(l.aux.get(scale.size(), error));
      auto* dout = static_cast<uint16_t*>(l.out.get(out.size_bytes(), error));
      if (!dw || !ds || !dout) return false;
      if (!l.put(dw, w.data(), w.size(), error) || !l.put(ds, scale.data(), scale.size(), error)) return false;
      launch_fp8(dw, w.size(), g, row_begin, kind, ds, scols, dout, sms_, l.stream);
      return l.get(out.data(), dout, out.size_bytes(), error) && l.finish("fp8 dequant kernel", error);
    });
  }

  bool has_bf16_digest() const override { return kGpuTraits.has_bf16_digest; }
  bool fp8_bf16_digest(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                       std::span<const uint8_t> scale, const DigestWeights& dw8, F32Digest& out,
                       std::string& error) override {
    if (!backend_args::fp8_ok(w.size(), row_begin, g, kind, scale.size(), w.size()) || w.size() > kDigestMaxElems)
      return bad(error, "fp8_bf16_digest");
    out = F32Digest{};
    if (w.empty()) return true;
    const uint64_t scols = fp8_scale_cols(g);
    return on_lane(error, [&](Lane& l) {
      return digested<uint16_t, Bf16Bits>(l, w, scale, w.size(), dw8, out, "fp8 digest kernel", error,
                                          [&](const uint8_t* dw, const uint8_t* ds, uint16_t* dout) {
                                            launch_fp8(dw, w.size(), g, row_begin, kind, ds, scols, dout, sms_, l.stream);
                                          });
    });
  }
  bool mxfp4_bf16_digest(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                         const DigestWeights& dw4, F32Digest& out, std::string& error) override {
    if (!backend_args::mxfp4_ok(w.size(), scale.size(), rows, k, rows * k) || rows * k > kDigestMaxElems)
      return bad(error, "mxfp4_bf16_digest");
    out = F32Digest{};
    if (w.empty()) return true;
    const uint64_t elems = rows * k;
    return on_lane(error, [&](Lane& l) {
      return digested<float, F32AsBf16Bits>(l, w, scale, elems, dw4, out, "mxfp4 digest kernel", error,
                                            [&](const uint8_t* dw, const uint8_t* ds, float* dout) {
                                              const uint32_t words = static_cast<uint32_t>(w.size() / 4);
                                              k_mxfp4<<<grid_for(words), kThreads, 0, l.stream>>>(
                                                  reinterpret_cast<const uint32_t*>(dw), words, ds,
                                                  reinterpret_cast<float4*>(dout));
                                            });
    });
  }

  bool mxfp4_to_f32(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    if (!backend_args::mxfp4_ok(w.size(), scale.size(), rows, k, out.size())) return bad(error, "mxfp4_to_f32");
    if (w.size() / 4 >= k4G) return bad(error, "mxfp4_to_f32 (size)");
    return on_lane(error, [&](Lane& l) {
      auto* dw = static_cast<uint8_t*>(l.in.get(w.size(), error));
      auto* ds = static_cast<uint8_t*>(l.aux.get(scale.size(), error));
      auto* dout = static_cast<float*>(l.out.get(out.size_bytes(), error));
      if (!dw || !ds || !dout) return false;
      if (!l.put(dw, w.data(), w.size(), error) || !l.put(ds, scale.data(), scale.size(), error)) return false;
      const uint32_t words = static_cast<uint32_t>(w.size() / 4);  // rows of k/2 bytes, k % 32 == 0
      k_mxfp4<<<grid_for(words), kThreads, 0, l.stream>>>(reinterpret_cast<const uint32_t*>(dw), words, ds,
                                                          reinterpret_cast<float4*>(dout));
      return l.get(out.data(), dout, out.size_bytes(), error) && l.finish("mxfp4 dequant kernel", error);
    });
  }

  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    if (!backend_args::int8_shift_ok(tiles.size(), shift2.size(), p, q.size()))
      return bad(error, "decode_int8_shift");
    if (tiles.size() / 4 >= k4G || q.size() >= k4G) return bad(error, "decode_int8_shift (size)");
    return on_lane(error, [&](Lane& l) {
      auto* dt = static_cast<uint8_t*>(l.in.get(tiles.size(), error));
      auto* ds = static_cast<uint8_t*>(l.aux.get(shift2.size(), error));
      auto* dq = static_cast<int8_t*>(l.out.get(q.size(), error));
      if (!dt || !ds || !dq) return false;
      if (!l.put(dt, tiles.data(), tiles.size(), error) || !l.put(ds, shift2.data(), shift2.size(), error)) return false;
      launch_decode(reinterpret_cast<const uint32_t*>(dt), tiles.size() / 4, ds, p.rows, p.k,
                    reinterpret_cast<uint32_t*>(dq), l.stream);
      return l.get(q.data(), dq, q.size(), error) && l.finish("int8-shift decode kernel", error);
    });
  }

  bool has_int8_digest() const override { return kGpuTraits.has_int8_digest; }
  bool int8_shift_digest(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         const DigestWeights& dw8, F32Digest& out, std::string& error) override {
    if (!backend_args::int8_shift_ok(tiles.size(), shift2.size(), p, p.rows * p.k) || p.rows * p.k / 4 > kDigestMaxElems)
      return bad(error, "int8_shift_digest");
    const uint64_t words = p.rows * p.k / 4;
    return on_lane(error, [&](Lane& l) {
      return digested<uint32_t, WordBits>(l, tiles, shift2, words, dw8, out, "int8-shift digest kernel", error,
                                          [&](const uint8_t* dt, const uint8_t* ds, uint32_t* dq) {
                                            launch_decode(reinterpret_cast<const uint32_t*>(dt), tiles.size() / 4, ds,
                                                          p.rows, p.k, dq, l.stream);
                                          });
    });
  }

  bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a,
                            std::span<float> a_scale, std::string& error) override {
    if (!backend_args::quantize_ok(x.size(), m, k, a.size(), a_scale.size()) || m > 65535u * 1024)
      return bad(error, "quantize_activations");
    if (m == 0) return true;
    return on_lane(error, [&](Lane& l) {
      auto* dx = static_cast<float*>(l.in.get(x.size_bytes(), error));
      auto* da = static_cast<int8_t*>(l.out.get(a.size(), error));
      auto* ds = static_cast<float*>(l.aux.get(a_scale.size_bytes(), error));
      if (!dx || !da || !ds) return false;
      if (!l.put(dx, x.data(), x.size_bytes(), error)) return false;
      launch_quantize(dx, m, k, da, ds, l.stream);
      return l.get(a.data(), da, a.size(), error) && l.get(a_scale.data(), ds, a_scale.size_bytes(), error) &&
             l.finish("quantize kernel", error);
    });
  }

  bool int8_gemm(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const uint8_t> tiles,
                 std::span<const uint8_t> shift2, std::span<const float> cs, uint64_t m, const RemapParams& p,
                 std::span<int32_t> acc, std::span<uint16_t> out, std::string& error) override {
    const uint64_t n = p.rows, k = p.k;
    if (!backend_args::gemm_ok(a.size(), a_scale.size(), tiles.size(), shift2.size(), cs.size(), m, p, acc.size(),
                               out.size()) ||
        m > 65535u * 128 || n >= k4G || k >= k4G)
      return bad(error, "int8_gemm");
    if (m == 0) return true;
    // One device buffer holds A, scales, tiles, shifts and channel scales back to back.
    const uint64_t off_as = align(a.size()), off_t = off_as + align(a_scale.size_bytes()),
                   off_s = off_t + align(tiles.size()), off_c = off_s + align(shift2.size()),
                   total = off_c + align(cs.size_bytes());
    return on_lane(error, [&](Lane& l) {
      auto* base = static_cast<uint8_t*>(l.in.get(total, error));
      auto* dout = static_cast<uint16_t*>(l.out.get(out.size_bytes(), error));
      int32_t* dacc = nullptr;
      if (!acc.empty()) dacc = static_cast<int32_t*>(l.aux.get(acc.size_bytes(), error));
      if (!base || !dout || (!acc.empty() && !dacc)) return false;
      if (!l.put(base, a.data(), a.size(), error) || !l.put(base + off_as, a_scale.data(), a_scale.size_bytes(), error) ||
          !l.put(base + off_t, tiles.data(), tiles.size(), error) ||
          !l.put(base + off_s, shift2.data(), shift2.size(), error) ||
          !l.put(base + off_c, cs.data(), cs.size_bytes(), error))
        return false;
      launch_gemm(reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + off_as),
                  reinterpret_cast<const uint32_t*>(base + off_t), base + off_s,
                  reinterpret_cast<const float*>(base + off_c), m, n, k, dacc, dout, l.stream);
      return l.get(out.data(), dout, out.size_bytes(), error) &&
             (acc.empty() || l.get(acc.data(), dacc, acc.size_bytes(), error)) && l.finish("int8 gemm kernel", error);
    });
  }

  void launch_gemm(const int8_t* a, const float* as, const uint32_t* tiles, const uint8_t* shift2, const float* cs,
                   uint64_t m, uint64_t n, uint64_t k, int32_t* acc, uint16_t* out, gpuStream_t stream = 0) const {
#if defined(__CUDACC__)
    if (major_ >= 8) {
      const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>((m + kBM - 1) / kBM));
      if (gemm_min_blocks_ == 2) {
        k_gemm_mma<2><<<grid, 256, 0, stream>>>(a, as, tiles, shift2, cs, static_cast<uint32_t>(m),
                                                static_cast<uint32_t>(n), static_cast<uint32_t>(k), acc, out);
      } else {
        k_gemm_mma<1><<<grid, 256, 0, stream>>>(a, as, tiles, shift2, cs, static_cast<uint32_t>(m),
                                                static_cast<uint32_t>(n), static_cast<uint32_t>(k), acc, out);
      }
      return;
    }
#endif
    const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads), static_cast<unsigned>(m));
    k_gemm_generic<<<grid, kThreads, 0, stream>>>(a, as, tiles, shift2, cs, m, n, k, acc, out);
  }

  bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out, std::string& error) override {
    const GgmlBlockShape shape = ggml_gpu_block(type);
    if (shape.elems == 0) {
      error = "unsupported type id " + std::to_string(type) + " for the GPU kernels";
      return false;
    }
    if (blocks.size() % shape.bytes || out.size() != blocks.size() / shape.bytes * shape.elems)
      return bad(error, "ggml_to_f32");
    if (blocks.empty()) return true;
    return on_lane(error, [&](Lane& l) {
      // Rounded up to 16 bytes: the block kernels read whole 16-byte chunks.
      auto* db = static_cast<uint8_t*>(l.in.get((blocks.size() + 15) / 16 * 16, error));
      auto* dout = static_cast<float*>(l.out.get(out.size_bytes(), error));
      if (!db || !dout) return false;
      if (!l.put(db, blocks.data(), blocks.size(), error)) return false;
      launch_ggml(type, db, blocks.size() / shape.bytes, tables_, dout, sms_, l.stream);
      return l.get(out.data(), dout, out.size_bytes(), error) && l.finish("ggml dequant kernel", error);
    });
  }

  bool has_ggml_digest() const override { return kGpuTraits.has_ggml_digest; }
  bool ggml_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                   std::string& error) override {
    const GgmlBlockShape shape = ggml_gpu_block(type);
    if (shape.elems == 0) {
      error = "unsupported type id " + std::to_string(type) + " for the GPU kernels";
      return false;
    }
    const uint64_t elems = blocks.size() / shape.bytes * shape.elems;
    if (blocks.size() % shape.bytes || elems > kDigestMaxElems) return bad(error, "ggml_digest");
    out = F32Digest{};
    if (blocks.empty()) return true;
    return on_lane(error, [&](Lane& l) {
      return digested<float, F32Bits>(l, blocks, {}, elems, w, out, "ggml digest kernel", error,
                                      [&](const uint8_t* db, const uint8_t*, float* dout) {
                                        launch_ggml(type, db, blocks.size() / shape.bytes, tables_, dout, sms_, l.stream);
                                      });
    });
  }

  const GgmlTables& tables() const { return tables_; }
  unsigned sms() const { return sms_; }

 private:
  static uint64_t align(uint64_t x) { return (x + 255) / 256 * 256; }
  static bool bad(std::string& error, const char* what) {
    error = std::string(what) + ": bad arguments";
    return false;
  }
  // The 16 bytes of a digest kernel's two sums, after the lane's stream is done.
  // One digested call on lane l, the shape of every *_digest above: `main` into the lane's
  // input buffer (rounded up to whole 16-byte words, which some kernels read), `side`
  // (scales, shift2; may be empty) into its aux buffer with the two 64-bit sums after it;
  // decode(main, side, dout) queues the n results of type T, k_digest<T, Bits> sums them,
  // and only the 16 bytes of sums come back.
  template <class T, class Bits, class Decode>
  bool digested(Lane& l, std::span<const uint8_t> main, std::span<const uint8_t> side, uint64_t n, const DigestWeights& w,
                F32Digest& out, const char* what, std::string& error, Decode decode) {
    DigestTables dt{};
    if (!digest_tables(w, dt, error)) return false;
    auto* dmain = static_cast<uint8_t*>(l.in.get((main.size() + 15) / 16 * 16, error));
    auto* dside = static_cast<uint8_t*>(l.aux.get(align(side.size()) + 16, error));
    auto* dout = static_cast<T*>(l.out.get(n * sizeof(T), error));
    if (!dmain || !dside || !dout) return false;
    auto* dsum = reinterpret_cast<unsigned long long*>(dside + align(side.size()));
    if (!l.put(dmain, main.data(), main.size(), error)) return false;
    if (!side.empty() && !l.put(dside, side.data(), side.size(), error)) return false;
    if (!check(gpuMemsetAsync(dsum, 0, 16, l.stream), "clearing the digest", error)) return false;
    decode(dmain, dside, dout);
    k_digest<T, Bits><<<resident_grid(n, sms_), kThreads, 0, l.stream>>>(dout, n, dt, dsum);
    return fetch_digest(l, dsum, out, what, error);
  }
  static bool fetch_digest(Lane& l, const unsigned long long* dsum, F32Digest& out, const char* what, std::string& error) {
    uint64_t sums[2] = {0, 0};
    if (!l.get(sums, dsum, 16, error) || !l.finish(what, error)) return false;
    out = F32Digest{sums[0], sums[1]};
    return true;
  }
  // Runs `body` on a free lane of this thread's device (the runtime's current device is
  // per thread: the verifier's worker threads select it on every call).
  template <class Body>
  bool on_lane(std::string& error, Body&& body) {
    if (!check(gpuSetDevice(ordinal_), "cannot select the device", error)) return false;
    Lane* lane = lanes_.acquire(error);
    if (!lane) return false;
    lane->begin();
    const bool ok = body(*lane);
    if (!ok) (void)gpuStreamSynchronize(lane->stream);  // nothing of this call in flight when the lane is reused
    lanes_.release(lane);
    return ok;
  }
  // The digest weights of key w.key on the device (uploaded once per key; a run has one).
  bool digest_tables(const DigestWeights& w, DigestTables& t, std::string& error) {
    std::lock_guard<std::mutex> lock(digest_mu_);
    constexpr uint64_t kInner = kDigestSpan * sizeof(uint32_t), kOuter = kDigestSpan * sizeof(uint64_t);
    constexpr uint64_t kAll = 2 * kInner + 2 * kOuter;
    if (!digest_ready_ || digest_key_ != w.key) {
      // Another key: no kernel may still read the old tables (runs do not overlap; be sure).
      if (digest_ready_ && !check(gpuDeviceSynchronize(), "digest tables", error)) return false;
      digest_ready_ = false;
      auto* base = static_cast<uint8_t*>(digest_buf_.get(kAll, error));
      if (!base) return false;
      // The inner tables' pad entry (kDigestInnerStored) is for the CPU's loads only: not uploaded.
      if (w.inner_a.size() != kDigestInnerStored || w.inner_b.size() != kDigestInnerStored ||
          w.outer_a.size() != kDigestSpan || w.outer_b.size() != kDigestSpan)
        return bad(error, "digest tables");
      if (!upload(base, w.inner_a.data(), kInner, error) || !upload(base + kInner, w.inner_b.data(), kInner, error) ||
          !upload(base + 2 * kInner, w.outer_a.data(), kOuter, error) ||
          !upload(base + 2 * kInner + kOuter, w.outer_b.data(), kOuter, error))
        return false;
      digest_key_ = w.key;
      digest_ready_ = true;
    }
    auto* base = static_cast<const uint8_t*>(digest_buf_.get(kAll, error));
    t = DigestTables{reinterpret_cast<const uint32_t*>(base), reinterpret_cast<const uint32_t*>(base + kInner),
                     reinterpret_cast<const uint64_t*>(base + 2 * kInner),
                     reinterpret_cast<const uint64_t*>(base + 2 * kInner + kOuter)};
    return true;
  }
  static bool upload(void* dst, const void* src, uint64_t bytes, std::string& error) {
    return bytes == 0 || check(gpuMemcpy(dst, src, bytes, gpuMemcpyHostToDevice), "copy to device", error);
  }

  bool upload_tables(std::string& error) {
    const uint64_t sizes[6] = {ksigns_iq2xs.size(), iq3xxs_grid.size() * 4, iq3s_grid.size() * 4, iq2s_grid.size() * 8,
                               kvalues_iq4nl.size(), kvalues_fp4.size()};
    const void* src[6] = {ksigns_iq2xs.data(), iq3xxs_grid.data(), iq3s_grid.data(),
                          iq2s_grid.data(),    kvalues_iq4nl.data(), kvalues_fp4.data()};
    uint64_t offs[6], total = 0;
    for (int i = 0; i < 6; ++i) {
      offs[i] = total;
      total += align(sizes[i]);
    }
    auto* base = static_cast<uint8_t*>(tables_buf_.get(total, error));
    if (!base) return false;
    for (int i = 0; i < 6; ++i)
      if (!upload(base + offs[i], src[i], sizes[i], error)) return false;
    tables_ = GgmlTables{base + offs[0],
                         reinterpret_cast<const uint32_t*>(base + offs[1]),
                         reinterpret_cast<const uint32_t*>(base + offs[2]),
                         reinterpret_cast<const uint64_t*>(base + offs[3]),
                         reinterpret_cast<const int8_t*>(base + offs[4]),
                         reinterpret_cast<const int8_t*>(base + offs[5])};
    return true;
  }

  std::string name_;
  int ordinal_ = 0;
  int major_ = 0;
  unsigned sms_ = 1;

 public:
  int gemm_min_blocks_ = 1;  // occupancy the tensor-core GEMM is compiled for (bench compares 1 and 2)

 private:
  DeviceBuffer tables_buf_;  // before lanes_: freed after every lane's buffers
  GgmlTables tables_{};
  std::mutex digest_mu_;
  DeviceBuffer digest_buf_;
  uint64_t digest_key_ = 0;
  bool digest_ready_ = false;
  LanePool lanes_;
  friend bool ckpt::run_gpu_benchmarks(int, const GpuBenchOptions&, std::string&, std::string&);
};

}  // namespace

std::unique_ptr<DecodeBackend> make_gpu_backend(int ordinal, std::string& error) {
  auto b = std::make_unique<GpuBackend>();
  if (!b->open(ordinal, error)) return nullptr;
  return b;
}

std::unique_ptr<DecodeBackend> start_gpu_backend(int ordinal) {
  return std::make_unique<OpeningBackend>([ordinal](std::string& error) { return make_gpu_backend(ordinal, error); },
                                          kGpuTraits);
}

}  // namespace ckpt

// ---- benchmarks ------------------------------------------------------------------------

namespace ckpt {
namespace {

// Mean milliseconds of `iterations` runs of `launch` after one warm-up.
template <class F>
float time_ms(int iterations, F&& launch) {
  gpuEvent_t start, stop;
  (void)gpuEventCreate(&start);
  (void)gpuEventCreate(&stop);
  launch();
  (void)gpuEventRecord(start, 0);
  for (int i = 0; i < iterations; ++i) launch();
  (void)gpuEventRecord(stop, 0);
  (void)gpuEventSynchronize(stop);
  float ms = 0;
  (void)gpuEventElapsedTime(&ms, start, stop);
  (void)gpuEventDestroy(start);
  (void)gpuEventDestroy(stop);
  return ms / static_cast<float>(iterations);
}

__global__ void k_fill(uint32_t* p, uint64_t words, uint32_t seed) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < words; i += uint64_t(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = x;
  }
}

// Words turned into normal floats in [2^-8, 2^0) with random signs: hidden-state-like values.
__global__ void k_normal_floats(uint32_t* p, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = (p[i] & 0x807FFFFFu) | ((119u + ((p[i] >> 23) & 7u)) << 23);
}

__global__ void k_add(uint8_t* p, uint64_t n, uint8_t v) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>(p[i] + v);
}

// Bytes with no FP8/E8M0 NaN codes, so the timed path is the common one.
__global__ void k_sanitize(uint8_t* p, uint64_t n, uint8_t mask) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
    p[i] &= mask;
}

// Every block's f16 scale at byte `off` made finite (exponent < 31): the timed path is the
// common one, as real checkpoints have it (blocks with NaN or infinite scales take
// decode.h's X86Arith path; the tests cover it).
__global__ void k_finite_f16(uint8_t* p, uint64_t blocks, uint32_t block_bytes, uint32_t off) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < blocks; i += uint64_t(gridDim.x) * blockDim.x)
    p[i * block_bytes + off + 1] &= 0xBB;
}

// As time_ms, for work spread over several streams (each launch(i) picks its own): every
// stream starts after `start` and `stop` waits for all of them.
template <class F>
float time_ms_streams(int iterations, const std::vector<gpuStream_t>& streams, F&& launch) {
  gpuEvent_t start, stop;
  std::vector<gpuEvent_t> done(streams.size());
  (void)gpuEventCreate(&start);
  (void)gpuEventCreate(&stop);
  for (auto& e : done) (void)gpuEventCreate(&e);
  launch();
  (void)gpuDeviceSynchronize();
  (void)gpuEventRecord(start, streams[0]);
  for (size_t s = 1; s < streams.size(); ++s) (void)gpuStreamWaitEvent(streams[s], start, 0);
  for (int i = 0; i < iterations; ++i) launch();
  for (size_t s = 1; s < streams.size(); ++s) {
    (void)gpuEventRecord(done[s], streams[s]);
    (void)gpuStreamWaitEvent(streams[0], done[s], 0);
  }
  (void)gpuEventRecord(stop, streams[0]);
  (void)gpuEventSynchronize(stop);
  float ms = 0;
  (void)gpuEventElapsedTime(&ms, start, stop);
  (void)gpuEventDestroy(start);
  (void)gpuEventDestroy(stop);
  for (auto& e : done) (void)gpuEventDestroy(e);
  return ms / static_cast<float>(iterations);
}

std::string line(const std::string& kernel, uint64_t in, uint64_t out, float ms, double copy_gbps) {
  const double gbps = static_cast<double>(in + out) / (ms * 1e6);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "{\"kernel\":\"%s\",\"in_bytes\":%llu,\"out_bytes\":%llu,\"ms\":%.4f,\"gbps\":%.1f,\"ratio_to_copy\":%.3f}\n",
                kernel.c_str(), static_cast<unsigned long long>(in), static_cast<unsigned long long>(out), ms, gbps,
                gbps / copy_gbps);
  return buf;
}

}  // namespace

bool run_gpu_benchmarks(int device, const GpuBenchOptions& o, std::string& report, std::string& error) {
  // The fixed costs every verify pays beside its kernels, listed for the verify ratios: the
  // backend's open (runtime start, context, tables, lanes) and a pinned host-to-device copy
  // (every input byte of a verify crosses it once).
  const auto t_open = std::chrono::steady_clock::now();
  GpuBackend be;
  if (!be.open(device, error)) return false;
  const double open_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_open).count();
  report = "{\"device\":\"" + be.name() + "\"}\n";
  const uint64_t in_bytes = o.bytes / 4096 * 4096;
  {
    PinnedBuffer staging;
    DeviceBuffer dst_buf;
    staging.allocate(in_bytes);
    auto* dst = static_cast<uint8_t*>(dst_buf.get(in_bytes, error));
    if (!dst) return false;
    double h2d_gbps = 0;  // 0: no pinned memory to time it with
    if (staging.data()) {
      std::memset(staging.data(), 1, in_bytes);
      const float h2d_ms = time_ms(o.iterations, [&] {
        (void)gpuMemcpyAsync(dst, staging.data(), in_bytes, gpuMemcpyHostToDevice, 0);
      });
      h2d_gbps = static_cast<double>(in_bytes) / (h2d_ms * 1e6);
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "{\"backend_open_ms\":%.1f,\"h2d_pinned_bytes\":%llu,\"h2d_pinned_gbps\":%.1f}\n",
                  open_ms, static_cast<unsigned long long>(in_bytes), h2d_gbps);
    report += buf;
  }
  DeviceBuffer in_buf, aux_buf, out_buf;
  // The largest output is f32 from 4-bit codes: 8 x the input.
  auto* in = static_cast<uint8_t*>(in_buf.get(in_bytes, error));
  auto* aux = static_cast<uint8_t*>(aux_buf.get(in_bytes, error));
  auto* out = static_cast<uint8_t*>(out_buf.get(in_bytes * 8, error));
  if (!in || !aux || !out) return false;
  k_fill<<<4096, kThreads>>>(reinterpret_cast<uint32_t*>(in), in_bytes / 4, 1u);
  k_fill<<<4096, kThreads>>>(reinterpret_cast<uint32_t*>(aux), in_bytes / 4, 2u);
  if (!check(gpuDeviceSynchronize(), "fill", error)) return false;

  // The baseline: a device-to-device copy; its rate counts bytes read plus written.
  const float copy_ms = time_ms(o.iterations, [&] { (void)gpuMemcpyAsync(out, in, in_bytes, gpuMemcpyDeviceToDevice, 0); });
  const double copy_gbps = 2.0 * static_cast<double>(in_bytes) / (copy_ms * 1e6);
  report += line("d2d_copy", in_bytes, in_bytes, copy_ms, copy_gbps);

  // FP8 block dequant, 7168-wide rows (a V4 projection), 128x128 blocks.
  const uint64_t cols = 7168, rows = in_bytes / cols, n = rows * cols;
  k_sanitize<<<4096, kThreads>>>(in, in_bytes, 0xF7);   // clears bit 3: never 0x7F/0xFF
  // Scales as real checkpoints have them: E8M0 bytes 100..131 (2^-27..2^4); F32 multipliers
  // built from the same words are normal floats.
  k_sanitize<<<4096, kThreads>>>(aux, in_bytes, 0x1F);
  k_add<<<4096, kThreads>>>(aux, in_bytes, 100);
  const uint64_t srows = (rows + 127) / 128, scols = cols / 128;
  const Fp8Grid fg{rows, cols, 128, 128};
  float ms = time_ms(o.iterations, [&] {
    launch_fp8(in, n, fg, 0, Fp8ScaleKind::e8m0, aux, scols, reinterpret_cast<uint16_t*>(out), be.sms());
  });
  report += line("fp8_e8m0_to_bf16", n + srows * scols, 2 * n, ms, copy_gbps);
  ms = time_ms(o.iterations, [&] {
    launch_fp8(in, n, fg, 0, Fp8ScaleKind::f32, aux, scols, reinterpret_cast<uint16_t*>(out), be.sms());
  });
  report += line("fp8_f32_to_bf16", n + 4 * srows * scols, 2 * n, ms, copy_gbps);
  ms = time_ms(o.iterations, [&] {
    k_mxfp4<<<grid_for(in_bytes / 4), kThreads>>>(reinterpret_cast<const uint32_t*>(in), static_cast<uint32_t>(in_bytes / 4),
                                                  aux, reinterpret_cast<float4*>(out));
  });
  report += line("mxfp4_to_f32", in_bytes + in_bytes / 16, 8 * in_bytes, ms, copy_gbps);

  // INT8-shift decode of w13-shaped experts (N = K = 4096) as verify runs it: one launch per
  // expert (its tiles, shifts and output each contiguous), the experts spread over kLanes
  // streams as over the backend's lanes.
  const uint64_t ek = 4096, en = 4096, e_tiles = en * ek / 2, e_shift = en * ek / 128, experts = in_bytes / e_tiles;
  std::vector<gpuStream_t> streams(kLanes);
  for (auto& st : streams)
    if (!check(gpuStreamCreateNonBlocking(&st), "cannot create a stream", error)) return false;
  ms = time_ms_streams(o.iterations, streams, [&] {
    for (uint64_t e = 0; e < experts; ++e)
      launch_decode(reinterpret_cast<const uint32_t*>(in + e * e_tiles), e_tiles / 4, aux + e * e_shift, en, ek,
                    reinterpret_cast<uint32_t*>(out + e * en * ek), streams[e % kLanes]);
  });
  for (auto& st : streams) (void)gpuStreamDestroy(st);
  report += line("int8_shift_decode", experts * (e_tiles + e_shift), experts * en * ek, ms, copy_gbps);
  // The same bytes as one matrix of in_bytes / 2048 rows (a shape no expert has: its tile
  // columns lie 2 MiB apart), one launch; listed for the record beside the line above.
  const uint64_t dk = 4096, dn = in_bytes / (dk / 2) / 8 * 8, groups = dn / 8, words = dk / 32 * groups * 32;
  ms = time_ms(o.iterations, [&] {
    launch_decode(reinterpret_cast<const uint32_t*>(in), words, aux, dn, dk, reinterpret_cast<uint32_t*>(out));
  });
  report += line("int8_shift_decode_one_tall_matrix", words * 4 + dn * dk / 128, dn * dk, ms, copy_gbps);

  // Activation quantization: f32 [M, 4096] -> int8 + one scale per row.
  const uint64_t qk = 4096, qm = in_bytes / 4 / qk;
  k_normal_floats<<<4096, kThreads>>>(reinterpret_cast<uint32_t*>(in), in_bytes / 4);
  ms = time_ms(o.iterations, [&] {
    launch_quantize(reinterpret_cast<const float*>(in), qm, qk, reinterpret_cast<int8_t*>(out), reinterpret_cast<float*>(aux));
  });
  report += line("quantize_activations", qm * qk * 4, qm * qk + qm * 4, ms, copy_gbps);

  for (int32_t type : {int32_t(kQ8_0), int32_t(kQ4_K), int32_t(kQ6_K), int32_t(kIQ4_NL), int32_t(kMXFP4),
                       int32_t(kIQ3_XXS), int32_t(kIQ3_S), int32_t(kIQ2_S)}) {
    const GgmlBlockShape s = ggml_gpu_block(type);
    const uint64_t blocks = std::min<uint64_t>(in_bytes / s.bytes, in_bytes * 2 / s.elems);  // out <= 8 x in
    for (int off : {type == kQ6_K ? 208 : 0, type == kQ4_K ? 2 : -1}) {
      if (off >= 0 && type != kMXFP4) k_finite_f16<<<4096, kThreads>>>(in, blocks, s.bytes, static_cast<uint32_t>(off));
    }
    ms = time_ms(o.iterations, [&] { launch_ggml(type, in, blocks, be.tables(), reinterpret_cast<float*>(out), be.sms()); });
    const char* names[] = {"Q8_0", "Q4_K", "Q6_K", "IQ4_NL", "MXFP4", "IQ3_XXS", "IQ3_S", "IQ2_S"};
    const int32_t ids[] = {kQ8_0, kQ4_K, kQ6_K, kIQ4_NL, kMXFP4, kIQ3_XXS, kIQ3_S, kIQ2_S};
    const char* name = "?";
    for (int i = 0; i < 8; ++i)
      if (ids[i] == type) name = names[i];
    report += line(std::string("ggml_") + name + "_to_f32", blocks * s.bytes, blocks * s.elems * 4, ms, copy_gbps);
  }
  if (!check(gpuDeviceSynchronize(), "benchmark kernels", error)) return false;

  // INT8 GEMM at M x N x K on the INT8-shift layout.
  const uint64_t m = o.gemm_m, gn = o.gemm_n, gk = o.gemm_k;
  RemapParams p;
  p.rows = gn;
  p.k = gk;
  const uint64_t a_bytes = m * gk, t_bytes = remap_mxfp4_bytes(p), s_bytes = remap_shift2_bytes(p);
  DeviceBuffer ga, gt, gs, gcs, gas, gout;
  auto* da = static_cast<int8_t*>(ga.get(a_bytes, error));
  auto* dt = static_cast<uint32_t*>(gt.get(t_bytes, error));
  auto* dsh = static_cast<uint8_t*>(gs.get(s_bytes, error));
  auto* dcs = static_cast<float*>(gcs.get(gn * 4, error));
  auto* das = static_cast<float*>(gas.get(m * 4, error));
  auto* dout = static_cast<uint16_t*>(gout.get(m * gn * 2, error));
  if (!da || !dt || !dsh || !dcs || !das || !dout) return false;
  k_fill<<<4096, kThreads>>>(reinterpret_cast<uint32_t*>(da), a_bytes / 4, 3u);
  k_fill<<<4096, kThreads>>>(dt, t_bytes / 4, 4u);
  k_fill<<<4096, kThreads>>>(reinterpret_cast<uint32_t*>(dsh), s_bytes / 4, 5u);
  (void)gpuMemset(dcs, 0, gn * 4);
  (void)gpuMemset(das, 0, m * 4);
  for (int blocks : {1, 2}) {
    be.gemm_min_blocks_ = blocks;
    ms = time_ms(o.iterations, [&] { be.launch_gemm(da, das, dt, dsh, dcs, m, gn, gk, nullptr, dout); });
    if (!check(gpuDeviceSynchronize(), "gemm", error)) return false;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "{\"kernel\":\"%s\",\"m\":%llu,\"n\":%llu,\"k\":%llu,\"ms\":%.4f,\"tops\":%.1f}\n",
                  blocks == 1 ? "int8_shift_gemm" : "int8_shift_gemm_2blocks", static_cast<unsigned long long>(m),
                  static_cast<unsigned long long>(gn), static_cast<unsigned long long>(gk), ms,
                  2.0 * double(m) * double(gn) * double(gk) / (ms * 1e9));
    report += buf;
  }
  return true;
}

}  // namespace ckpt
