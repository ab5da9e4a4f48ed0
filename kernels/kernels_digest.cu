// The verify digest on the GPU: k_digest sums decode.h's digest_terms of n results (an
// f32, a BF16, an f32 rounded to BF16, or a word of four int8) per thread, then per block
// in shared memory, with one atomic add per block and sum; launch_digest picks the
// instantiation. Addition mod 2^64 is order-free: the CPU's digest bit for bit.
#include "gpu_launch.h"

namespace ckpt::gpu {
namespace {

using namespace kern;

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

}  // namespace

void launch_digest(DigestBits bits, const void* x, uint64_t n, const DigestTables& t, unsigned long long* out,
                   unsigned sms, gpuStream_t stream) {
  const unsigned grid = resident_grid(n, sms);
  switch (bits) {
    case DigestBits::f32:
      k_digest<float, F32Bits><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), n, t, out);
      return;
    case DigestBits::bf16:
      k_digest<uint16_t, Bf16Bits><<<grid, kThreads, 0, stream>>>(static_cast<const uint16_t*>(x), n, t, out);
      return;
    case DigestBits::f32_as_bf16:
      k_digest<float, F32AsBf16Bits><<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), n, t, out);
      return;
    case DigestBits::word:
      k_digest<uint32_t, WordBits><<<grid, kThreads, 0, stream>>>(static_cast<const uint32_t*>(x), n, t, out);
      return;
  }
}

}  // namespace ckpt::gpu
