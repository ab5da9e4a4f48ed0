// The one portability header between CUDA and HIP (and plain C++ for the host emulation).
// Kernel sources include only this and decode.h; everything vendor-specific is spelled
// here once: the runtime API names (streams and pinned host memory included), the
// host/device qualifier, and the few intrinsics the
// kernels use (byte permute, int8 dot product, funnel shift, multiply-high, the paired
// float->BF16 conversion).
#pragma once

#include <cstdint>

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define CKPT_GPU_BACKEND "hip"
#define gpuError_t hipError_t
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemset hipMemset
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuEvent_t hipEvent_t
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuStream_t hipStream_t
#define gpuStreamCreateNonBlocking(s) hipStreamCreateWithFlags(s, hipStreamNonBlocking)
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuStreamDestroy hipStreamDestroy
#define gpuMallocHost(p, bytes) hipHostMalloc(p, bytes, hipHostMallocDefault)
#define gpuFreeHost hipHostFree
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#define CKPT_GPU_BACKEND "cuda"
#define gpuError_t cudaError_t
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemset cudaMemset
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuEvent_t cudaEvent_t
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuStream_t cudaStream_t
#define gpuStreamCreateNonBlocking(s) cudaStreamCreateWithFlags(s, cudaStreamNonBlocking)
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuStreamDestroy cudaStreamDestroy
#define gpuMallocHost(p, bytes) cudaMallocHost(p, bytes)
#define gpuFreeHost cudaFreeHost
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define CKPT_HD __host__ __device__ inline
#else
#define CKPT_HD inline
#endif

// For a rare slow path that must not be inlined (and if-converted) into a hot loop.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define CKPT_HD_NOINLINE __host__ __device__ __noinline__ inline
#else
#define CKPT_HD_NOINLINE __attribute__((noinline)) inline
#endif

// True while compiling device code (either vendor), false for host passes and plain C++.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define CKPT_DEVICE_PASS 1
#else
#define CKPT_DEVICE_PASS 0
#endif

// The paired binary32 -> BF16 conversion instruction (cvt.rn.bf16x2.f32) exists on NVIDIA
// sm_80 and later; elsewhere decode.h rounds in integer arithmetic.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CKPT_HAS_CVT_BF16X2 1
#else
#define CKPT_HAS_CVT_BF16X2 0
#endif

// The INT8 tensor-core MMA (mma.sync m16n8k32 s8) exists on NVIDIA sm_80 and later.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define CKPT_HAS_MMA_S8 1
#else
#define CKPT_HAS_MMA_S8 0
#endif

namespace ckpt::kern {

// Bit casts without <bit> (not every device toolchain has std::bit_cast in device code).
CKPT_HD float bits_to_float(uint32_t u) {
  union { uint32_t u; float f; } v{u};
  return v.f;
}
CKPT_HD uint32_t float_to_bits(float f) {
  union { float f; uint32_t u; } v{f};
  return v.u;
}

// Sum of the four int8 products of two packed words plus c (dp4a). Exact in int32.
CKPT_HD int32_t dot4_i8(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int32_t>(static_cast<int8_t>(a >> (8 * i))) * static_cast<int32_t>(static_cast<int8_t>(b >> (8 * i)));
  }
  return c;
#endif
}

// High 32 bits of the 64-bit product a * b.
CKPT_HD uint32_t umulhi32(uint32_t a, uint32_t b) {
#if CKPT_DEVICE_PASS
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// The low 32 bits of (hi:lo) >> shift, shift in [0, 31]: a word at any byte offset of an
// array of aligned words (shift = 8 * offset % 4).
CKPT_HD uint32_t funnel_shift_r(uint32_t lo, uint32_t hi, uint32_t shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, shift);
#else
  return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> shift);
#endif
}

// n / d for n < 2^31 and 1 <= d < 2^31 as one multiply-high and a shift (the round-up
// method of Granlund and Montgomery): the kernels divide element indices by run-time row
// and block widths without a ~20-instruction integer division per group.
struct FastDiv {
  uint32_t d = 1, mul = 0, shift = 0;  // mul == 0: d == 1
  FastDiv() = default;
  CKPT_HD explicit FastDiv(uint32_t divisor) : d(divisor) {
    if (divisor <= 1) return;
    uint32_t log2_up = 0;
    while ((uint64_t{1} << log2_up) < divisor) ++log2_up;
    mul = static_cast<uint32_t>(((uint64_t{1} << (31 + log2_up)) + divisor - 1) / divisor);
    shift = log2_up - 1;
  }
  CKPT_HD uint32_t div(uint32_t n) const { return mul ? umulhi32(n, mul) >> shift : n; }
};

#if CKPT_HAS_CVT_BF16X2
// lo and hi each rounded to nearest even to BF16 (subnormals kept, overflow to inf), packed
// with lo in the low half.
__device__ inline uint32_t cvt_rn_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif

// IEEE binary32 multiply, rounded to nearest even, never fused with a neighbouring add.
CKPT_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;  // host and HIP builds compile with -ffp-contract=off
#endif
}

#if defined(__CUDACC__) || defined(__HIPCC__)
// Max over each group of 32 consecutive lanes (a whole warp on NVIDIA; half a wave64 on AMD).
__device__ inline float max_over_32_lanes(float v) {
  for (int off = 16; off > 0; off /= 2) {
#if defined(__HIPCC__)
    v = fmaxf(v, __shfl_xor(v, off, 32));
#else
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
#endif
  }
  return v;
}
#endif

// IEEE binary32 subtraction, rounded to nearest even, never fused with a neighbouring multiply.
CKPT_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;  // host and HIP builds compile with -ffp-contract=off
#endif
}

CKPT_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace ckpt::kern
