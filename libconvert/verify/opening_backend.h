// A backend whose device opens on a thread of its own: what `ckpt-gpu verify` runs on, so
// that the ~0.3 s a CUDA process spends starting its runtime and context (measured on an
// H200 host: cuInit 0.1-0.23 s, the primary context 0.11-0.15 s, pinned staging 0.06 s)
// overlaps the CPU references the verifier computes ahead (DecodeBackend::state). Calls
// made before the open has finished wait for it; after a failed open they fail with its
// reason, and state() says `failed` so that the caller reports NO_DEVICE as before.
// Included by nvcc (kernels/backend_gpu.cu makes it): the standard library only.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "verify/backend.h"

namespace ckpt {

// What the verifier asks of a backend before its first call (planning): known without
// opening the device, and the same as the opened backend answers (a test checks it).
struct BackendTraits {
  uint64_t max_chunk_bytes = uint64_t{64} << 20;
  uint64_t host_memory = 0;
  bool concurrent = false;
  bool has_ggml_digest = false;
  bool has_bf16_digest = false;
  bool has_int8_digest = false;
};

// Every call is forwarded by ForwardingBackend to target(): the opened backend.
class OpeningBackend final : public ForwardingBackend {
 public:
  using Open = std::function<std::unique_ptr<DecodeBackend>(std::string& error)>;
  OpeningBackend(Open open, BackendTraits traits)
      : traits_(traits), opened_(std::async(std::launch::async, [open = std::move(open)] {
          Opened o;
          o.backend = open(o.error);
          if (!o.backend && o.error.empty()) o.error = "the backend did not open";
          return o;
        })) {}
  // Joins the opening thread (std::future from std::async waits in its destructor).
  ~OpeningBackend() override = default;

  std::string name() const override {
    const Opened& o = wait();
    return o.backend ? o.backend->name() : "none";
  }
  uint64_t max_chunk_bytes() const override { return traits_.max_chunk_bytes; }
  bool concurrent() const override { return traits_.concurrent; }
  uint64_t host_memory() const override { return traits_.host_memory; }
  bool has_ggml_digest() const override { return traits_.has_ggml_digest; }
  bool has_bf16_digest() const override { return traits_.has_bf16_digest; }
  bool has_int8_digest() const override { return traits_.has_int8_digest; }
  BackendState state(std::string* why = nullptr) const override {
    if (opened_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return BackendState::opening;
    const Opened& o = opened_.get();
    if (o.backend) return o.backend->state(why);
    if (why) *why = o.error;
    return BackendState::failed;
  }

 protected:
  // The opened backend (waiting for the open), or nullptr with the open's reason.
  DecodeBackend* target(std::string& error) override {
    const Opened& o = wait();
    if (!o.backend) error = "no usable GPU: " + o.error;
    return o.backend.get();
  }

 private:
  struct Opened {
    std::unique_ptr<DecodeBackend> backend;
    std::string error;
  };
  const Opened& wait() const { return opened_.get(); }

  BackendTraits traits_;
  std::shared_future<Opened> opened_;
};

}  // namespace ckpt
