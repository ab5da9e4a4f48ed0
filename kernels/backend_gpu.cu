// The GPU DecodeBackend: every DecodeBackend call (verify/backend.h) runs on a free device
// lane (gpu_lanes.h) with its inputs staged, the kernels queued through their launchers
// (gpu_launch.h), and only the results (or a digest's 16 bytes) copied back. Single source:
// nvcc compiles it as CUDA, hipcc as HIP (-x hip); everything vendor-specific is in
// gpu_compat.h. make_gpu_backend opens a device; start_gpu_backend opens it on a thread
// of its own (OpeningBackend) while the verifier plans.
#include "backend_gpu.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu_lanes.h"
#include "gpu_launch.h"
#include "numerics/ggml_tables.h"
#include "verify/opening_backend.h"

namespace ckpt {
namespace gpu {
namespace {

using namespace kern;

class GpuBackend final : public DecodeBackend {
 public:
  bool open(int ordinal, std::string& error) {
    int count = 0;
    if (!check(gpuGetDeviceCount(&count), "cannot start the GPU runtime", error)) return false;
    if (ordinal < 0 || ordinal >= count) {
      error = "device " + std::to_string(ordinal) + " not present (" + std::to_string(count) + " device(s))";
      return false;
    }
    ordinal_ = ordinal;
    if (!check(gpuSetDevice(ordinal), "cannot select the device", error)) return false;
    gpuDeviceProp prop;
    if (!check(gpuGetDeviceProperties(&prop, ordinal), "cannot query the device", error)) return false;
    major_ = prop.major;
    sms_ = static_cast<unsigned>(std::max(1, prop.multiProcessorCount));
    name_ = std::string(CKPT_GPU_BACKEND) + ": " + prop.name + " (cc " + std::to_string(prop.major) + "." +
            std::to_string(prop.minor) + ", " + std::to_string(prop.multiProcessorCount) + " SMs)";
    return upload_tables(error) && lanes_.prewarm(error);
  }

  std::string name() const override { return name_; }
  uint64_t max_chunk_bytes() const override { return kGpuTraits.max_chunk_bytes; }
  bool concurrent() const override { return kGpuTraits.concurrent; }  // one call per lane (LanePool)
  uint64_t host_memory() const override { return kGpuTraits.host_memory; }

  bool fp8_to_bf16(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                   std::span<const uint8_t> scale, std::span<uint16_t> out, std::string& error) override {
    if (!backend_args::fp8_ok(w.size(), row_begin, g, kind, scale.size(), out.size())) return bad(error, "fp8_to_bf16");
    const uint64_t scols = fp8_scale_cols(g);
    return on_lane(error, [&](Lane& l) {
      auto* dw = static_cast<uint8_t*>(l.in.get(w.size(), error));
      auto* ds = static_cast<uint8_t*>(l.aux.get(scale.size(), error));
      auto* dout = static_cast<uint16_t*>(l.out.get(out.size_bytes(), error));
      if (!dw || !ds || !dout) return false;
      if (!l.put(dw, w.data(), w.size(), error) || !l.put(ds, scale.data(), scale.size(), error)) return false;
      launch_fp8(dw, w.size(), g, row_begin, kind, ds, scols, dout, sms_, l.stream);
      return l.get(out.data(), dout, out.size_bytes(), error) && l.finish("fp8 dequant kernel", error);
    });
  }

  bool has_bf16_digest() const override { return kGpuTraits.has_bf16_digest; }
  bool fp8_bf16_digest(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                       std::span<const uint8_t> scale, const DigestWeights& dw8, F32Digest& out,
                       std::string& error) override {
    if (!backend_args::fp8_ok(w.size(), row_begin, g, kind, scale.size(), w.size()) || w.size() > kDigestMaxElems)
      return bad(error, "fp8_bf16_digest");
    out = F32Digest{};
    if (w.empty()) return true;
    const uint64_t scols = fp8_scale_cols(g);
    return on_lane(error, [&](Lane& l) {
      return digested<uint16_t>(DigestBits::bf16, l, w, scale, w.size(), dw8, out, "fp8 digest kernel", error,
                                          [&](const uint8_t* dw, const uint8_t* ds, uint16_t* dout) {
                                            launch_fp8(dw, w.size(), g, row_begin, kind, ds, scols, dout, sms_, l.stream);
                                          });
    });
  }
  bool mxfp4_bf16_digest(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                         const DigestWeights& dw4, F32Digest& out, std::string& error) override {
    if (!backend_args::mxfp4_ok(w.size(), scale.size(), rows, k, rows * k) || rows * k > kDigestMaxElems)
      return bad(error, "mxfp4_bf16_digest");
    out = F32Digest{};
    if (w.empty()) return true;
    const uint64_t elems = rows * k;
    return on_lane(error, [&](Lane& l) {
      return digested<float>(DigestBits::f32_as_bf16, l, w, scale, elems, dw4, out, "mxfp4 digest kernel", error,
                                            [&](const uint8_t* dw, const uint8_t* ds, float* dout) {
                                              launch_mxfp4(reinterpret_cast<const uint32_t*>(dw),
                                                           static_cast<uint32_t>(w.size() / 4), ds, dout, l.stream);
                                            });
    });
  }

  bool mxfp4_to_f32(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    if (!backend_args::mxfp4_ok(w.size(), scale.size(), rows, k, out.size())) return bad(error, "mxfp4_to_f32");
    if (w.size() / 4 >= k4G) return bad(error, "mxfp4_to_f32 (size)");
    return on_lane(error, [&](Lane& l) {
      auto* dw = static_cast<uint8_t*>(l.in.get(w.size(), error));
      auto* ds = static_cast<uint8_t*>(l.aux.get(scale.size(), error));
      auto* dout = static_cast<float*>(l.out.get(out.size_bytes(), error));
      if (!dw || !ds || !dout) return false;
      if (!l.put(dw, w.data(), w.size(), error) || !l.put(ds, scale.data(), scale.size(), error)) return false;
      const uint32_t words = static_cast<uint32_t>(w.size() / 4);  // rows of k/2 bytes, k % 32 == 0
      launch_mxfp4(reinterpret_cast<const uint32_t*>(dw), words, ds, dout, l.stream);
      return l.get(out.data(), dout, out.size_bytes(), error) && l.finish("mxfp4 dequant kernel", error);
    });
  }

  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    if (!backend_args::int8_shift_ok(tiles.size(), shift2.size(), p, q.size()))
      return bad(error, "decode_int8_shift");
    if (tiles.size() / 4 >= k4G || q.size() >= k4G) return bad(error, "decode_int8_shift (size)");
    return on_lane(error, [&](Lane& l) {
      auto* dt = static_cast<uint8_t*>(l.in.get(tiles.size(), error));
      auto* ds = static_cast<uint8_t*>(l.aux.get(shift2.size(), error));
      auto* dq = static_cast<int8_t*>(l.out.get(q.size(), error));
      if (!dt || !ds || !dq) return false;
      if (!l.put(dt, tiles.data(), tiles.size(), error) || !l.put(ds, shift2.data(), shift2.size(), error)) return false;
      launch_decode(reinterpret_cast<const uint32_t*>(dt), tiles.size() / 4, ds, p.rows, p.k,
                    reinterpret_cast<uint32_t*>(dq), l.stream);
      return l.get(q.data(), dq, q.size(), error) && l.finish("int8-shift decode kernel", error);
    });
  }

  bool has_int8_digest() const override { return kGpuTraits.has_int8_digest; }
  bool int8_shift_digest(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         const DigestWeights& dw8, F32Digest& out, std::string& error) override {
    if (!backend_args::int8_shift_ok(tiles.size(), shift2.size(), p, p.rows * p.k) || p.rows * p.k / 4 > kDigestMaxElems)
      return bad(error, "int8_shift_digest");
    const uint64_t words = p.rows * p.k / 4;
    return on_lane(error, [&](Lane& l) {
      return digested<uint32_t>(DigestBits::word, l, tiles, shift2, words, dw8, out, "int8-shift digest kernel", error,
                                          [&](const uint8_t* dt, const uint8_t* ds, uint32_t* dq) {
                                            launch_decode(reinterpret_cast<const uint32_t*>(dt), tiles.size() / 4, ds,
                                                          p.rows, p.k, dq, l.stream);
                                          });
    });
  }

  bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a,
                            std::span<float> a_scale, std::string& error) override {
    if (!backend_args::quantize_ok(x.size(), m, k, a.size(), a_scale.size()) || m > 65535u * 1024)
      return bad(error, "quantize_activations");
    if (m == 0) return true;
    return on_lane(error, [&](Lane& l) {
      auto* dx = static_cast<float*>(l.in.get(x.size_bytes(), error));
      auto* da = static_cast<int8_t*>(l.out.get(a.size(), error));
      auto* ds = static_cast<float*>(l.aux.get(a_scale.size_bytes(), error));
      if (!dx || !da || !ds) return false;
      if (!l.put(dx, x.data(), x.size_bytes(), error)) return false;
      launch_quantize(dx, m, k, da, ds, l.stream);
      return l.get(a.data(), da, a.size(), error) && l.get(a_scale.data(), ds, a_scale.size_bytes(), error) &&
             l.finish("quantize kernel", error);
    });
  }

  bool int8_gemm(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const uint8_t> tiles,
                 std::span<const uint8_t> shift2, std::span<const float> cs, uint64_t m, const RemapParams& p,
                 std::span<int32_t> acc, std::span<uint16_t> out, std::string& error) override {
    const uint64_t n = p.rows, k = p.k;
    if (!backend_args::gemm_ok(a.size(), a_scale.size(), tiles.size(), shift2.size(), cs.size(), m, p, acc.size(),
                               out.size()) ||
        m > 65535u * 128 || n >= k4G || k >= k4G)
      return bad(error, "int8_gemm");
    if (m == 0) return true;
    // One device buffer holds A, scales, tiles, shifts and channel scales back to back.
    const uint64_t off_as = align(a.size()), off_t = off_as + align(a_scale.size_bytes()),
                   off_s = off_t + align(tiles.size()), off_c = off_s + align(shift2.size()),
                   total = off_c + align(cs.size_bytes());
    return on_lane(error, [&](Lane& l) {
      auto* base = static_cast<uint8_t*>(l.in.get(total, error));
      auto* dout = static_cast<uint16_t*>(l.out.get(out.size_bytes(), error));
      int32_t* dacc = nullptr;
      if (!acc.empty()) dacc = static_cast<int32_t*>(l.aux.get(acc.size_bytes(), error));
      if (!base || !dout || (!acc.empty() && !dacc)) return false;
      if (!l.put(base, a.data(), a.size(), error) || !l.put(base + off_as, a_scale.data(), a_scale.size_bytes(), error) ||
          !l.put(base + off_t, tiles.data(), tiles.size(), error) ||
          !l.put(base + off_s, shift2.data(), shift2.size(), error) ||
          !l.put(base + off_c, cs.data(), cs.size_bytes(), error))
        return false;
      launch_gemm(reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + off_as),
                  reinterpret_cast<const uint32_t*>(base + off_t), base + off_s,
                  reinterpret_cast<const float*>(base + off_c), m, n, k, dacc, dout, major_, 1, l.stream);
      return l.get(out.data(), dout, out.size_bytes(), error) &&
             (acc.empty() || l.get(acc.data(), dacc, acc.size_bytes(), error)) && l.finish("int8 gemm kernel", error);
    });
  }

  bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out, std::string& error) override {
    const GgmlBlockShape shape = ggml_gpu_block(type);
    if (shape.elems == 0) {
      error = "unsupported type id " + std::to_string(type) + " for the GPU kernels";
      return false;
    }
    if (blocks.size() % shape.bytes || out.size() != blocks.size() / shape.bytes * shape.elems)
      return bad(error, "ggml_to_f32");
    if (blocks.empty()) return true;
    return on_lane(error, [&](Lane& l) {
      // Rounded up to 16 bytes: the block kernels read whole 16-byte chunks.
      auto* db = static_cast<uint8_t*>(l.in.get((blocks.size() + 15) / 16 * 16, error));
      auto* dout = static_cast<float*>(l.out.get(out.size_bytes(), error));
      if (!db || !dout) return false;
      if (!l.put(db, blocks.data(), blocks.size(), error)) return false;
      launch_ggml(type, db, blocks.size() / shape.bytes, tables_, dout, sms_, l.stream);
      return l.get(out.data(), dout, out.size_bytes(), error) && l.finish("ggml dequant kernel", error);
    });
  }

  bool has_ggml_digest() const override { return kGpuTraits.has_ggml_digest; }
  bool ggml_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                   std::string& error) override {
    const GgmlBlockShape shape = ggml_gpu_block(type);
    if (shape.elems == 0) {
      error = "unsupported type id " + std::to_string(type) + " for the GPU kernels";
      return false;
    }
    const uint64_t elems = blocks.size() / shape.bytes * shape.elems;
    if (blocks.size() % shape.bytes || elems > kDigestMaxElems) return bad(error, "ggml_digest");
    out = F32Digest{};
    if (blocks.empty()) return true;
    return on_lane(error, [&](Lane& l) {
      return digested<float>(DigestBits::f32, l, blocks, {}, elems, w, out, "ggml digest kernel", error,
                                      [&](const uint8_t* db, const uint8_t*, float* dout) {
                                        launch_ggml(type, db, blocks.size() / shape.bytes, tables_, dout, sms_, l.stream);
                                      });
    });
  }

  const GgmlTables& tables() const { return tables_; }
  unsigned sms() const { return sms_; }
  int major() const { return major_; }

 private:
  static uint64_t align(uint64_t x) { return (x + 255) / 256 * 256; }
  static bool bad(std::string& error, const char* what) {
    error = std::string(what) + ": bad arguments";
    return false;
  }
  // The 16 bytes of a digest kernel's two sums, after the lane's stream is done.
  // One digested call on lane l, the shape of every *_digest above: `main` into the lane's
  // input buffer (rounded up to whole 16-byte words, which some kernels read), `side`
  // (scales, shift2; may be empty) into its aux buffer with the two 64-bit sums after it;
  // decode(main, side, dout) queues the n results of type T, launch_digest(bits) sums them,
  // and only the 16 bytes of sums come back.
  template <class T, class Decode>
  bool digested(DigestBits bits, Lane& l, std::span<const uint8_t> main, std::span<const uint8_t> side, uint64_t n,
                const DigestWeights& w, F32Digest& out, const char* what, std::string& error, Decode decode) {
    DigestTables dt{};
    if (!digest_tables(w, dt, error)) return false;
    auto* dmain = static_cast<uint8_t*>(l.in.get((main.size() + 15) / 16 * 16, error));
    auto* dside = static_cast<uint8_t*>(l.aux.get(align(side.size()) + 16, error));
    auto* dout = static_cast<T*>(l.out.get(n * sizeof(T), error));
    if (!dmain || !dside || !dout) return false;
    auto* dsum = reinterpret_cast<unsigned long long*>(dside + align(side.size()));
    if (!l.put(dmain, main.data(), main.size(), error)) return false;
    if (!side.empty() && !l.put(dside, side.data(), side.size(), error)) return false;
    if (!check(gpuMemsetAsync(dsum, 0, 16, l.stream), "clearing the digest", error)) return false;
    decode(dmain, dside, dout);
    launch_digest(bits, dout, n, dt, dsum, sms_, l.stream);
    return fetch_digest(l, dsum, out, what, error);
  }
  static bool fetch_digest(Lane& l, const unsigned long long* dsum, F32Digest& out, const char* what, std::string& error) {
    uint64_t sums[2] = {0, 0};
    if (!l.get(sums, dsum, 16, error) || !l.finish(what, error)) return false;
    out = F32Digest{sums[0], sums[1]};
    return true;
  }
  // Runs `body` on a free lane of this thread's device (the runtime's current device is
  // per thread: the verifier's worker threads select it on every call).
  template <class Body>
  bool on_lane(std::string& error, Body&& body) {
    if (!check(gpuSetDevice(ordinal_), "cannot select the device", error)) return false;
    Lane* lane = lanes_.acquire(error);
    if (!lane) return false;
    lane->begin();
    const bool ok = body(*lane);
    if (!ok) (void)gpuStreamSynchronize(lane->stream);  // nothing of this call in flight when the lane is reused
    lanes_.release(lane);
    return ok;
  }
  // The digest weights of key w.key on the device (uploaded once per key; a run has one).
  bool digest_tables(const DigestWeights& w, DigestTables& t, std::string& error) {
    std::lock_guard<std::mutex> lock(digest_mu_);
    constexpr uint64_t kInner = kDigestSpan * sizeof(uint32_t), kOuter = kDigestSpan * sizeof(uint64_t);
    constexpr uint64_t kAll = 2 * kInner + 2 * kOuter;
    if (!digest_ready_ || digest_key_ != w.key) {
      // Another key: no kernel may still read the old tables (runs do not overlap; be sure).
      if (digest_ready_ && !check(gpuDeviceSynchronize(), "digest tables", error)) return false;
      digest_ready_ = false;
      auto* base = static_cast<uint8_t*>(digest_buf_.get(kAll, error));
      if (!base) return false;
      // The inner tables' pad entry (kDigestInnerStored) is for the CPU's loads only: not uploaded.
      if (w.inner_a.size() != kDigestInnerStored || w.inner_b.size() != kDigestInnerStored ||
          w.outer_a.size() != kDigestSpan || w.outer_b.size() != kDigestSpan)
        return bad(error, "digest tables");
      if (!upload(base, w.inner_a.data(), kInner, error) || !upload(base + kInner, w.inner_b.data(), kInner, error) ||
          !upload(base + 2 * kInner, w.outer_a.data(), kOuter, error) ||
          !upload(base + 2 * kInner + kOuter, w.outer_b.data(), kOuter, error))
        return false;
      digest_key_ = w.key;
      digest_ready_ = true;
    }
    auto* base = static_cast<const uint8_t*>(digest_buf_.get(kAll, error));
    t = DigestTables{reinterpret_cast<const uint32_t*>(base), reinterpret_cast<const uint32_t*>(base + kInner),
                     reinterpret_cast<const uint64_t*>(base + 2 * kInner),
                     reinterpret_cast<const uint64_t*>(base + 2 * kInner + kOuter)};
    return true;
  }
  static bool upload(void* dst, const void* src, uint64_t bytes, std::string& error) {
    return bytes == 0 || check(gpuMemcpy(dst, src, bytes, gpuMemcpyHostToDevice), "copy to device", error);
  }

  bool upload_tables(std::string& error) {
    const uint64_t sizes[6] = {ksigns_iq2xs.size(), iq3xxs_grid.size() * 4, iq3s_grid.size() * 4, iq2s_grid.size() * 8,
                               kvalues_iq4nl.size(), kvalues_fp4.size()};
    const void* src[6] = {ksigns_iq2xs.data(), iq3xxs_grid.data(), iq3s_grid.data(),
                          iq2s_grid.data(),    kvalues_iq4nl.data(), kvalues_fp4.data()};
    uint64_t offs[6], total = 0;
    for (int i = 0; i < 6; ++i) {
      offs[i] = total;
      total += align(sizes[i]);
    }
    auto* base = static_cast<uint8_t*>(tables_buf_.get(total, error));
    if (!base) return false;
    for (int i = 0; i < 6; ++i)
      if (!upload(base + offs[i], src[i], sizes[i], error)) return false;
    tables_ = GgmlTables{base + offs[0],
                         reinterpret_cast<const uint32_t*>(base + offs[1]),
                         reinterpret_cast<const uint32_t*>(base + offs[2]),
                         reinterpret_cast<const uint64_t*>(base + offs[3]),
                         reinterpret_cast<const int8_t*>(base + offs[4]),
                         reinterpret_cast<const int8_t*>(base + offs[5])};
    return true;
  }

  std::string name_;
  int ordinal_ = 0;
  int major_ = 0;
  unsigned sms_ = 1;
  DeviceBuffer tables_buf_;  // before lanes_: freed after every lane's buffers
  GgmlTables tables_{};
  std::mutex digest_mu_;
  DeviceBuffer digest_buf_;
  uint64_t digest_key_ = 0;
  bool digest_ready_ = false;
  LanePool lanes_;
};

}  // namespace

bool open_bench_device(int ordinal, BenchDevice& device, std::string& error) {
  auto be = std::make_unique<GpuBackend>();
  if (!be->open(ordinal, error)) return false;
  device.name = be->name();
  device.sms = be->sms();
  device.major = be->major();
  device.tables = be->tables();
  device.backend = std::move(be);
  return true;
}

}  // namespace gpu

std::unique_ptr<DecodeBackend> make_gpu_backend(int ordinal, std::string& error) {
  auto b = std::make_unique<gpu::GpuBackend>();
  if (!b->open(ordinal, error)) return nullptr;
  return b;
}

std::unique_ptr<DecodeBackend> start_gpu_backend(int ordinal) {
  return std::make_unique<OpeningBackend>([ordinal](std::string& error) { return make_gpu_backend(ordinal, error); },
                                          gpu::kGpuTraits);
}

}  // namespace ckpt
