// The INT8-shift format on the GPU: the tile decode to int8 rows, the activations'
// quantization to int8 with a scale per row, and the INT8 GEMM on the tile layout (tensor
// cores on sm_80+, dp4a elsewhere), with their launchers. Arithmetic: decode.h
// (decode_int8_shift_word, div_rn, f32_to_bf16_rne), spec §4 for the tile layout.
#include "gpu_launch.h"

namespace ckpt::gpu {
namespace {

using namespace kern;

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

}  // namespace

// The INT8-shift decode (k_decode_int8_shift). Measured before it on an H200 (docs/notes/
// h-gpu.md): a one-row-per-lane variant 0.19x of a device copy, a warp-shuffle store
// transpose 0.52, the lane-per-word layout 0.64.
void launch_decode(const uint32_t* tiles, uint64_t words, const uint8_t* shift2, uint64_t rows, uint64_t k, uint32_t* q,
                   gpuStream_t stream) {
  const uint32_t groups = static_cast<uint32_t>((rows + 7) / 8), kbs = static_cast<uint32_t>(k / 32);
  (void)words;  // = kbs * groups * 32
  const uint64_t blocks = uint64_t{(groups + 7) / 8} * ((kbs + 3) / 4);
  k_decode_int8_shift<<<static_cast<unsigned>(std::min<uint64_t>(blocks, 65535u * 16)), kThreads, 0, stream>>>(
      reinterpret_cast<const uint4*>(tiles), kbs, groups, shift2, static_cast<uint32_t>(rows), static_cast<uint32_t>(k),
      reinterpret_cast<uint4*>(q));
}

void launch_quantize(const float* x, uint64_t m, uint64_t k, int8_t* a, float* a_scale, gpuStream_t stream) {
  if (k % 4 == 0 && k <= uint64_t{kThreads} * kQuantVec * 4) {
    k_quantize_reg<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                           static_cast<uint32_t>(k / 4), a, a_scale);
  } else {
    k_quantize<<<static_cast<unsigned>(m), kThreads, 0, stream>>>(x, k, a, a_scale);
  }
}

void launch_gemm(const int8_t* a, const float* as, const uint32_t* tiles, const uint8_t* shift2, const float* cs,
                 uint64_t m, uint64_t n, uint64_t k, int32_t* acc, uint16_t* out, int major, int min_blocks,
                 gpuStream_t stream) {
#if defined(__CUDACC__)
  if (major >= 8) {
    const dim3 grid(static_cast<unsigned>((n + kBN - 1) / kBN), static_cast<unsigned>((m + kBM - 1) / kBM));
    if (min_blocks == 2) {
      k_gemm_mma<2><<<grid, 256, 0, stream>>>(a, as, tiles, shift2, cs, static_cast<uint32_t>(m),
                                              static_cast<uint32_t>(n), static_cast<uint32_t>(k), acc, out);
    } else {
      k_gemm_mma<1><<<grid, 256, 0, stream>>>(a, as, tiles, shift2, cs, static_cast<uint32_t>(m),
                                              static_cast<uint32_t>(n), static_cast<uint32_t>(k), acc, out);
    }
    return;
  }
#else
  (void)major, (void)min_blocks;
#endif
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads), static_cast<unsigned>(m));
  k_gemm_generic<<<grid, kThreads, 0, stream>>>(a, as, tiles, shift2, cs, m, n, k, acc, out);
}

}  // namespace ckpt::gpu
