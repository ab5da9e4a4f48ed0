// `ckpt-gpu bench` (gpu_bench.h): every decode kernel's throughput against a
// device-to-device copy of the same bytes in the same run, the backend's fixed costs (open,
// pinned host-to-device copy) and the INT8 GEMM's rate at a given shape. The kernels run
// through the launchers verify runs (gpu_launch.h); the few kernels here only make inputs.
#include "gpu_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend_gpu.h"
#include "gpu_lanes.h"
#include "gpu_launch.h"

namespace ckpt {
namespace gpu {
namespace {

using namespace kern;

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
}  // namespace gpu

bool run_gpu_benchmarks(int device, const GpuBenchOptions& o, std::string& report, std::string& error) {
  using namespace gpu;
  // The fixed costs every verify pays beside its kernels, listed for the verify ratios: the
  // backend's open (runtime start, context, tables, lanes) and a pinned host-to-device copy
  // (every input byte of a verify crosses it once).
  const auto t_open = std::chrono::steady_clock::now();
  BenchDevice be;
  if (!open_bench_device(device, be, error)) return false;
  const double open_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_open).count();
  report = "{\"device\":\"" + be.name + "\"}\n";
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
    launch_fp8(in, n, fg, 0, Fp8ScaleKind::e8m0, aux, scols, reinterpret_cast<uint16_t*>(out), be.sms);
  });
  report += line("fp8_e8m0_to_bf16", n + srows * scols, 2 * n, ms, copy_gbps);
  ms = time_ms(o.iterations, [&] {
    launch_fp8(in, n, fg, 0, Fp8ScaleKind::f32, aux, scols, reinterpret_cast<uint16_t*>(out), be.sms);
  });
  report += line("fp8_f32_to_bf16", n + 4 * srows * scols, 2 * n, ms, copy_gbps);
  ms = time_ms(o.iterations, [&] {
    launch_mxfp4(reinterpret_cast<const uint32_t*>(in), static_cast<uint32_t>(in_bytes / 4), aux,
                 reinterpret_cast<float*>(out));
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
    ms = time_ms(o.iterations, [&] { launch_ggml(type, in, blocks, be.tables, reinterpret_cast<float*>(out), be.sms); });
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
    ms = time_ms(o.iterations, [&] { launch_gemm(da, das, dt, dsh, dcs, m, gn, gk, nullptr, dout, be.major, blocks); });
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
