// What `ckpt-gpu verify` asks of a decode device: the transforms a serving engine runs on
// the bytes ckptkit writes. Implemented by the CUDA/HIP kernels (kernels/backend_gpu.cu)
// and by their host emulation (kernels/backend_emulate.cpp: the same kernel arithmetic from
// kernels/decode.h, compiled for the CPU, so CI exercises it without a GPU). The verifier
// compares every result with libconvert's independent CPU reference (numerics/).
//
// Host spans in, host spans out; each call takes at most max_chunk_bytes() of input and
// the driver streams larger tensors through in chunks, so device memory stays bounded.
// This header is included by nvcc: keep it free of simdjson and of libconvert internals.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "numerics/f32_digest.h"
#include "numerics/fp8.h"
#include "numerics/int8_shift.h"

namespace ckpt {

enum class Fp8ScaleKind { e8m0, f32 };

// Whether a backend takes calls yet: an OpeningBackend is `opening` while its device starts
// (a CUDA process's first ~0.3 s), then `ready`, or `failed` when it could not.
enum class BackendState { ready, opening, failed };

class DecodeBackend {
 public:
  virtual ~DecodeBackend() = default;
  // "cuda: NVIDIA H200 (sm_90, 132 SMs)", "hip: ...", "emulate (host)".
  virtual std::string name() const = 0;
  // Largest input (bytes) the driver passes to one call.
  virtual uint64_t max_chunk_bytes() const { return uint64_t{64} << 20; }
  // Whether calls from several threads may overlap. The verifier runs its jobs on all
  // cores and serializes the calls of a backend that says no (the default).
  virtual bool concurrent() const { return false; }
  // Host memory (bytes) the backend itself may hold at most, whatever the calls: the GPU
  // backend's pinned staging buffers. The verifier counts it against --memory-budget.
  virtual uint64_t host_memory() const { return 0; }
  // Never waits. While `opening`, the verifier computes CPU references that need no device;
  // a call made meanwhile waits for the open. `why` gets the reason of a `failed`.
  virtual BackendState state(std::string* /*why*/ = nullptr) const { return BackendState::ready; }

  // Rows [row_begin, row_begin + weight_rows.size()/g.cols) of an FP8 E4M3 weight with its
  // WHOLE scale grid (E8M0 bytes or F32 little-endian) -> BF16 bits (numerics/fp8.h rules).
  virtual bool fp8_to_bf16(std::span<const uint8_t> weight_rows, uint64_t row_begin, const Fp8Grid& g,
                           Fp8ScaleKind kind, std::span<const uint8_t> scale_grid, std::span<uint16_t> out,
                           std::string& error) = 0;
  // DeepSeek MXFP4 [rows, k/2] packed (low nibble = even element) with E8M0 scales [rows, k/32]
  // -> f32 [rows, k]: lut_x2[c] * 2^(b - 128), code 8 being -0.
  virtual bool mxfp4_to_f32(std::span<const uint8_t> weight, std::span<const uint8_t> scale, uint64_t rows,
                            uint64_t k, std::span<float> out, std::string& error) = 0;
  // One expert's INT8-shift slabs -> q [p.rows, p.k] = lut_x2[code] << shift2.
  virtual bool decode_int8_shift(std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                                 const RemapParams& p, std::span<int8_t> q, std::string& error) = 0;
  // Per-token activation quantization (mxfp4-int8-shift.md §6), no clamp.
  virtual bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a_i8,
                                    std::span<float> a_scale, std::string& error) = 0;
  // INT8 GEMM on the INT8-shift layout with the spec's epilogue (§5): acc [m, p.rows] int32
  // and out [m, p.rows] BF16 = bf16_rne((float(acc) * a_scale[r]) * channel_scale[c]).
  virtual bool int8_gemm(std::span<const int8_t> a_i8, std::span<const float> a_scale,
                         std::span<const uint8_t> mxfp4_slab, std::span<const uint8_t> shift2_slab,
                         std::span<const float> channel_scale, uint64_t m, const RemapParams& p,
                         std::span<int32_t> acc, std::span<uint16_t> out, std::string& error) = 0;
  // Whole blocks of a ggml type -> f32 (gguf.md §5). False with "unsupported type ..." for a
  // type the kernels do not decode.
  virtual bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out,
                           std::string& error) = 0;
  // The same decode, its f32 results digested on the device (numerics/f32_digest.h: element
  // i of `blocks` is index i, at most kDigestMaxElems) and only the digest returned: what
  // the verifier compares with the CPU's digest of its own dequantization. Backends that
  // say no to has_ggml_digest() are compared element by element (ggml_to_f32).
  virtual bool has_ggml_digest() const { return false; }
  virtual bool ggml_digest(int32_t /*type*/, std::span<const uint8_t> /*blocks*/, const DigestWeights& /*w*/,
                           F32Digest& /*out*/, std::string& error) {
    error = "this backend has no digest";
    return false;
  }
  // The BF16 a --experts bf16 conversion wrote, digested on the device (bf16_digest: element
  // i of the call is index i, its bits the BF16 value's): fp8_to_bf16's results, and
  // mxfp4_to_f32's rounded to BF16 (RNE, as convert rounds). The verifier compares them
  // with the CPU's digest of OUT's bytes instead of bringing every BF16 (or f32) back.
  virtual bool has_bf16_digest() const { return false; }
  virtual bool fp8_bf16_digest(std::span<const uint8_t> /*weight_rows*/, uint64_t /*row_begin*/, const Fp8Grid& /*g*/,
                               Fp8ScaleKind /*kind*/, std::span<const uint8_t> /*scale_grid*/, const DigestWeights& /*w*/,
                               F32Digest& /*out*/, std::string& error) {
    error = "this backend has no digest";
    return false;
  }
  virtual bool mxfp4_bf16_digest(std::span<const uint8_t> /*weight*/, std::span<const uint8_t> /*scale*/, uint64_t /*rows*/,
                                 uint64_t /*k*/, const DigestWeights& /*w*/, F32Digest& /*out*/, std::string& error) {
    error = "this backend has no digest";
    return false;
  }
  // The INT8-shift decode digested on the device (int8_digest: q's 32-bit words numbered
  // from 0, at most kDigestMaxElems of them) and only the digest returned: what the verifier
  // compares with the CPU's int8_shift_digest of the same slabs instead of bringing q back.
  virtual bool has_int8_digest() const { return false; }
  virtual bool int8_shift_digest(std::span<const uint8_t> /*mxfp4_slab*/, std::span<const uint8_t> /*shift2_slab*/,
                                 const RemapParams& /*p*/, const DigestWeights& /*w*/, F32Digest& /*out*/,
                                 std::string& error) {
    error = "this backend has no digest";
    return false;
  }
};

// The kinds of backend call, as --stats counts them (VerifyStages::device_*, gemm_device).
enum class CallKind { fp8, mxfp4, int8_decode, ggml, gemm };

// A backend that passes every call to another one: the base of the verifier's wrappers
// (one call at a time, timing), of OpeningBackend (the device opened on its own thread)
// and of the tests' faulty backends, each of which overrides only what it changes. The
// twelve calls are forwarded here and nowhere else: each goes through target() (where to)
// and around() (how: serialized, timed), so a wrapper overrides one of those, not the calls.
// Borrows `inner`, or owns it.
class ForwardingBackend : public DecodeBackend {
 public:
  explicit ForwardingBackend(DecodeBackend& inner) : inner_(&inner) {}
  explicit ForwardingBackend(std::unique_ptr<DecodeBackend> owned) : owned_(std::move(owned)), inner_(owned_.get()) {}
  std::string name() const override { return inner_->name(); }
  uint64_t max_chunk_bytes() const override { return inner_->max_chunk_bytes(); }
  bool concurrent() const override { return inner_->concurrent(); }
  uint64_t host_memory() const override { return inner_->host_memory(); }
  BackendState state(std::string* why = nullptr) const override { return inner_->state(why); }
  bool has_ggml_digest() const override { return inner_->has_ggml_digest(); }
  bool has_bf16_digest() const override { return inner_->has_bf16_digest(); }
  bool has_int8_digest() const override { return inner_->has_int8_digest(); }

  bool fp8_to_bf16(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                   std::span<const uint8_t> scale, std::span<uint16_t> out, std::string& error) override {
    return forward(CallKind::fp8, error, [&](DecodeBackend& b) { return b.fp8_to_bf16(w, row_begin, g, kind, scale, out, error); });
  }
  bool mxfp4_to_f32(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    return forward(CallKind::mxfp4, error, [&](DecodeBackend& b) { return b.mxfp4_to_f32(w, scale, rows, k, out, error); });
  }
  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    return forward(CallKind::int8_decode, error,
                   [&](DecodeBackend& b) { return b.decode_int8_shift(tiles, shift2, p, q, error); });
  }
  bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a,
                            std::span<float> a_scale, std::string& error) override {
    return forward(CallKind::gemm, error,
                   [&](DecodeBackend& b) { return b.quantize_activations(x, m, k, a, a_scale, error); });
  }
  bool int8_gemm(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const uint8_t> tiles,
                 std::span<const uint8_t> shift2, std::span<const float> cs, uint64_t m, const RemapParams& p,
                 std::span<int32_t> acc, std::span<uint16_t> out, std::string& error) override {
    return forward(CallKind::gemm, error,
                   [&](DecodeBackend& b) { return b.int8_gemm(a, a_scale, tiles, shift2, cs, m, p, acc, out, error); });
  }
  bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out, std::string& error) override {
    return forward(CallKind::ggml, error, [&](DecodeBackend& b) { return b.ggml_to_f32(type, blocks, out, error); });
  }
  bool ggml_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                   std::string& error) override {
    return forward(CallKind::ggml, error, [&](DecodeBackend& b) { return b.ggml_digest(type, blocks, w, out, error); });
  }
  bool fp8_bf16_digest(std::span<const uint8_t> wr, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                       std::span<const uint8_t> scale, const DigestWeights& w, F32Digest& out, std::string& error) override {
    return forward(CallKind::fp8, error,
                   [&](DecodeBackend& b) { return b.fp8_bf16_digest(wr, row_begin, g, kind, scale, w, out, error); });
  }
  bool mxfp4_bf16_digest(std::span<const uint8_t> wt, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    return forward(CallKind::mxfp4, error,
                   [&](DecodeBackend& b) { return b.mxfp4_bf16_digest(wt, scale, rows, k, w, out, error); });
  }
  bool int8_shift_digest(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    return forward(CallKind::int8_decode, error,
                   [&](DecodeBackend& b) { return b.int8_shift_digest(tiles, shift2, p, w, out, error); });
  }

 protected:
  // For a subclass whose calls go elsewhere (target() overridden) and which answers the
  // non-call members itself.
  ForwardingBackend() = default;
  DecodeBackend& inner() const { return *inner_; }

  // One forwarded call, not owned: run it on a backend.
  class Call {
   public:
    template <class F>
    explicit Call(F& f) : f_(&f), run_([](void* p, DecodeBackend& b) { return (*static_cast<F*>(p))(b); }) {}
    bool operator()(DecodeBackend& b) const { return run_(f_, b); }

   private:
    void* f_;
    bool (*run_)(void*, DecodeBackend&);
  };
  // Where every call goes: `inner`; nullptr (with `error` set) fails the call.
  virtual DecodeBackend* target(std::string& /*error*/) { return inner_; }
  // How every call runs: as it is; the verifier's wrappers serialize or time it.
  virtual bool around(CallKind /*kind*/, DecodeBackend& to, const Call& call) { return call(to); }

 private:
  template <class F>
  bool forward(CallKind kind, std::string& error, F f) {
    DecodeBackend* to = target(error);
    return to && around(kind, *to, Call(f));
  }

  std::unique_ptr<DecodeBackend> owned_;
  DecodeBackend* inner_ = nullptr;
};

// The argument checks every backend makes before it touches memory, in one place so the
// backends cannot drift apart. Sizes are element counts of the spans passed.
namespace backend_args {

inline bool fp8_ok(size_t w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind, size_t scale, size_t out) {
  if (g.cols == 0 || g.block_rows == 0 || g.block_cols == 0 || w % g.cols || out != w) return false;
  if (w / g.cols > g.rows || row_begin > g.rows - w / g.cols) return false;
  return scale == fp8_scale_rows(g) * fp8_scale_cols(g) * (kind == Fp8ScaleKind::e8m0 ? 1 : 4);
}
inline bool mxfp4_ok(size_t w, size_t scale, uint64_t rows, uint64_t k, size_t out) {
  return k % 32 == 0 && w == rows * k / 2 && scale == rows * k / 32 && out == rows * k;
}
inline bool int8_shift_ok(size_t tiles, size_t shift2, const RemapParams& p, size_t q) {
  return p.k != 0 && p.k % 32 == 0 && p.rows != 0 && tiles == remap_mxfp4_bytes(p) &&
         shift2 == remap_shift2_bytes(p) && q == p.rows * p.k;
}
inline bool quantize_ok(size_t x, uint64_t m, uint64_t k, size_t a, size_t a_scale) {
  return x == m * k && a == x && a_scale == m;
}
inline bool gemm_ok(size_t a, size_t a_scale, size_t tiles, size_t shift2, size_t cs, uint64_t m, const RemapParams& p,
                    size_t acc, size_t out) {
  const uint64_t n = p.rows, k = p.k;
  return k != 0 && k % 32 == 0 && a == m * k && a_scale == m && cs == n && out == m * n && (acc == 0 || acc == m * n) &&
         tiles == remap_mxfp4_bytes(p) && shift2 == remap_shift2_bytes(p);
}

}  // namespace backend_args

// The kernels' arithmetic run on the host (always available).
std::unique_ptr<DecodeBackend> make_emulated_backend();

// The CUDA or HIP backend on device `ordinal`; nullptr with `error` set when the binary has
// no GPU backend or no usable device is present.
std::unique_ptr<DecodeBackend> make_gpu_backend(int ordinal, std::string& error);

// The same backend opened on a thread of its own (verify/opening_backend.h): returned at
// once, `opening` until make_gpu_backend returns, then forwarding to it (or `failed`).
std::unique_ptr<DecodeBackend> start_gpu_backend(int ordinal);

}  // namespace ckpt
