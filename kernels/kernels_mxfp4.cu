// MXFP4 (the safetensors experts' packed E2M1 codes, one E8M0 scale per 32) to f32 on the
// GPU: the kernel and launch_mxfp4. Arithmetic: decode.h (mxfp4_to_f32).
#include "gpu_launch.h"

namespace ckpt::gpu {
namespace {

using namespace kern;

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

}  // namespace

void launch_mxfp4(const uint32_t* w, uint32_t words, const uint8_t* scale, float* out, gpuStream_t stream) {
  k_mxfp4<<<grid_for(words), kThreads, 0, stream>>>(w, words, scale, reinterpret_cast<float4*>(out));
}

}  // namespace ckpt::gpu
