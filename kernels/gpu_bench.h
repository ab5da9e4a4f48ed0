// `ckpt-gpu bench`: each decode kernel's throughput against a device-to-device copy of
// the same bytes in the same run, and the INT8 GEMM's rate at a given shape. Only in
// binaries built with a GPU backend.
#pragma once

#include <cstdint>
#include <string>

namespace ckpt {

struct GpuBenchOptions {
  uint64_t bytes = uint64_t{256} << 20;  // input bytes per kernel run
  int iterations = 20;
  uint64_t gemm_m = 4096, gemm_n = 4096, gemm_k = 4096;
};

// Fills `report` with one JSON object per line ({"kernel":..., "gbps":..., "ratio_to_copy":...}).
bool run_gpu_benchmarks(int device, const GpuBenchOptions& options, std::string& report, std::string& error);

}  // namespace ckpt
