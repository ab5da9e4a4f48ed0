// Linked into binaries built without a GPU compiler: the GPU backend is absent, and says so.
#include "gpu_bench.h"
#include "verify/backend.h"
#include "verify/opening_backend.h"

namespace ckpt {

std::unique_ptr<DecodeBackend> make_gpu_backend(int, std::string& error) {
  error = "this ckpt-gpu was built without a GPU backend (no nvcc or hipcc at build time)";
  return nullptr;
}

std::unique_ptr<DecodeBackend> start_gpu_backend(int ordinal) {
  return std::make_unique<OpeningBackend>([ordinal](std::string& error) { return make_gpu_backend(ordinal, error); },
                                          BackendTraits{});
}

bool run_gpu_benchmarks(int, const GpuBenchOptions&, std::string&, std::string& error) {
  error = "this ckpt-gpu was built without a GPU backend (no nvcc or hipcc at build time)";
  return false;
}

}  // namespace ckpt
