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

class OpeningBackend final : public DecodeBackend {
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

  bool fp8_to_bf16(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                   std::span<const uint8_t> scale, std::span<uint16_t> out, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->fp8_to_bf16(w, row_begin, g, kind, scale, out, error);
  }
  bool mxfp4_to_f32(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->mxfp4_to_f32(w, scale, rows, k, out, error);
  }
  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->decode_int8_shift(tiles, shift2, p, q, error);
  }
  bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a,
                            std::span<float> a_scale, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->quantize_activations(x, m, k, a, a_scale, error);
  }
  bool int8_gemm(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const uint8_t> tiles,
                 std::span<const uint8_t> shift2, std::span<const float> cs, uint64_t m, const RemapParams& p,
                 std::span<int32_t> acc, std::span<uint16_t> out, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->int8_gemm(a, a_scale, tiles, shift2, cs, m, p, acc, out, error);
  }
  bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->ggml_to_f32(type, blocks, out, error);
  }
  bool ggml_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                   std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->ggml_digest(type, blocks, w, out, error);
  }
  bool fp8_bf16_digest(std::span<const uint8_t> wr, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                       std::span<const uint8_t> scale, const DigestWeights& w, F32Digest& out, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->fp8_bf16_digest(wr, row_begin, g, kind, scale, w, out, error);
  }
  bool mxfp4_bf16_digest(std::span<const uint8_t> wt, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->mxfp4_bf16_digest(wt, scale, rows, k, w, out, error);
  }
  bool int8_shift_digest(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    DecodeBackend* b = inner(error);
    return b && b->int8_shift_digest(tiles, shift2, p, w, out, error);
  }

 private:
  struct Opened {
    std::unique_ptr<DecodeBackend> backend;
    std::string error;
  };
  const Opened& wait() const { return opened_.get(); }
  DecodeBackend* inner(std::string& error) const {
    const Opened& o = wait();
    if (!o.backend) error = "no usable GPU: " + o.error;
    return o.backend.get();
  }

  BackendTraits traits_;
  std::shared_future<Opened> opened_;
};

}  // namespace ckpt
