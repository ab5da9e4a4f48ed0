// FP8 block dequantization to BF16 on the GPU: the kernels (an E8M0 or F32 scale per block
// of a 2-D grid) and launch_fp8, which picks the 8-code group kernel where the shape allows
// it and the element kernels otherwise. Arithmetic: decode.h (fp8_*_to_bf16, fp8_group8_to_bf16).
#include "gpu_launch.h"

namespace ckpt::gpu {
namespace {

using namespace kern;

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

}  // namespace

void launch_fp8(const uint8_t* w, uint64_t n, const Fp8Grid& g, uint64_t row_begin, Fp8ScaleKind kind,
                const void* scale, uint64_t scols, uint16_t* out, unsigned sms, gpuStream_t stream) {
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

}  // namespace ckpt::gpu
