// What the benchmarks (gpu_bench.cu) need of the GPU backend (backend_gpu.cu): the backend
// opened on a device as verify opens it (so its open can be timed), its device's traits and
// the device-resident ggml tables. make_gpu_backend / start_gpu_backend (verify/backend.h)
// are the backend's public face.
#pragma once

#include <memory>
#include <string>

#include "decode.h"
#include "verify/backend.h"

namespace ckpt::gpu {

struct BenchDevice {
  std::unique_ptr<DecodeBackend> backend;  // holds the tables below
  std::string name;
  unsigned sms = 1;
  int major = 0;
  kern::GgmlTables tables{};
};
bool open_bench_device(int ordinal, BenchDevice& device, std::string& error);

}  // namespace ckpt::gpu
