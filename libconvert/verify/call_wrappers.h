// The verifier's backend wrappers: one call at a time for a backend whose calls may not
// overlap, and the timing of every call by kind (--stats). Both change only how a
// forwarded call runs (ForwardingBackend::around); the calls are forwarded in backend.h.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>

#include "verify/backend.h"
#include "verify/gpu_verify.h"

namespace ckpt {

// For a backend whose calls may not overlap (one device, shared device buffers): one call
// at a time, while the other jobs' reads, CPU references and comparisons go on.
class SerialBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;

 protected:
  bool around(CallKind, DecodeBackend& to, const Call& call) override {
    std::lock_guard<std::mutex> lock(mu_);
    return call(to);
  }

 private:
  std::mutex mu_;
};

// Times every backend call by kind (VerifyStages::device_*): the calling thread's wall
// time, summed in nanoseconds over all threads.
class TimedBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void add_to(VerifyStages& s) const {
    auto sec = [&](CallKind k) { return static_cast<double>(ns_[static_cast<int>(k)].load()) * 1e-9; };
    s.device_fp8 += sec(CallKind::fp8);
    s.device_mxfp4 += sec(CallKind::mxfp4);
    s.device_int8_decode += sec(CallKind::int8_decode);
    s.device_ggml += sec(CallKind::ggml);
    s.device += sec(CallKind::fp8) + sec(CallKind::mxfp4) + sec(CallKind::int8_decode) + sec(CallKind::ggml);
    s.gemm_device += sec(CallKind::gemm);
  }

 protected:
  bool around(CallKind kind, DecodeBackend& to, const Call& call) override {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = call(to);
    ns_[static_cast<int>(kind)] += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    return ok;
  }

 private:
  std::atomic<uint64_t> ns_[5] = {};
};

}  // namespace ckpt
