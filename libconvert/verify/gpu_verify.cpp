#include "verify/gpu_verify.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/parallel_reduce.h>
#include <tbb/task_arena.h>

#include "plan/plan.h"
#include "core/ggml_types.h"
#include "core/peak_rss.h"
#include "formats/loader.h"
#include "numerics/fp8.h"
#include "numerics/f32_digest.h"
#include "numerics/ggml_dequant.h"
#include "numerics/int8_gemm_ref.h"
#include "numerics/int8_shift.h"
#include "numerics/mxfp4.h"
#include "formats/pack_manifest.h"
#include "io/input_file.h"
#include "repack/pack_validate.h"
#include "validate/reference.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

std::string hex(uint64_t v, int digits) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

std::string fmt(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// First index where two arrays differ bitwise, or nullopt.
template <class T>
std::optional<uint64_t> first_difference(std::span<const T> a, std::span<const T> b) {
  if (std::memcmp(a.data(), b.data(), a.size_bytes()) == 0) return std::nullopt;
  for (uint64_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  return std::nullopt;
}

struct Slabs {
  std::vector<uint8_t> mxfp4, shift2, channel_scale;
};

// One INT8-shift expert's large buffers: IN's weight and scale bytes of each part, OUT's
// slabs and their remap, the CPU and device decodes, a step of the device's original weights.
struct ExpertBuffers {
  std::vector<std::vector<uint8_t>> parts;
  Slabs got, want;
  std::vector<int8_t> q_cpu, q_dev;
  std::vector<float> w_step;  // one step of the device's original weights (verify_mxfp4)
};

// Step buffers reused from job to job: a job takes a set for its run and gives it back, so
// at most (jobs in flight) sets exist, each grown to the largest step a job asked of it
// (within that job's accounted memory), and a pack of thousands of small parts allocates
// and page-faults a few sets, not one per part (the allocation and the freeing of fresh
// pages on every core was most of an expert pack's verify time). A set holds either step
// buffers or one INT8-shift expert's buffers, never both (StepPool::take), so it stays
// within the largest job's memory.
struct StepBuffers {
  std::vector<uint8_t> a, b, c;
  std::vector<uint16_t> h1, h2;
  std::vector<float> got, want;
  std::unique_ptr<ExpertBuffers> expert;  // set when the set serves experts
  template <class T>
  static std::span<T> take(std::vector<T>& v, uint64_t n) {
    if (v.size() < n) v.resize(n);
    return std::span<T>(v.data(), n);
  }
};

class StepPool {
 public:
  // A set of the kind asked for (experts' or steps'), else a free one of the other kind
  // emptied and turned into this kind, else a new one.
  std::unique_ptr<StepBuffers> take(bool expert = false) {
    std::unique_ptr<StepBuffers> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find_if(free_.rbegin(), free_.rend(), [&](const auto& f) { return (f->expert != nullptr) == expert; });
      if (it == free_.rend() && !free_.empty()) it = free_.rbegin();
      if (it != free_.rend()) {
        s = std::move(*it);
        free_.erase(std::next(it).base());
      }
    }
    if (!s) s = std::make_unique<StepBuffers>();
    if (expert && !s->expert) {
      s->a = {}, s->b = {}, s->c = {}, s->h1 = {}, s->h2 = {}, s->got = {}, s->want = {};
      s->expert = std::make_unique<ExpertBuffers>();
    } else if (!expert) {
      s->expert.reset();
    }
    return s;
  }
  void give(std::unique_ptr<StepBuffers> s) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(s));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<StepBuffers>> free_;
};

// A set taken from the pool for one scope (a fresh one when there is no pool).
class PooledSteps {
 public:
  explicit PooledSteps(StepPool* pool, bool expert = false)
      : pool_(pool), s_(pool ? pool->take(expert) : std::make_unique<StepBuffers>()) {
    if (expert && !s_->expert) s_->expert = std::make_unique<ExpertBuffers>();
  }
  PooledSteps(const PooledSteps&) = delete;
  PooledSteps& operator=(const PooledSteps&) = delete;
  ~PooledSteps() {
    if (pool_) pool_->give(std::move(s_));
  }
  StepBuffers* operator->() { return s_.get(); }

 private:
  StepPool* pool_;
  std::unique_ptr<StepBuffers> s_;
};

// What one job found: its checks and findings, merged into the report in job order, so the
// report is the same whatever the thread order.
struct Sink {
  std::deque<VerifyCheck> checks;  // a deque: references to a check survive later add_check
  Findings findings;
  VerifyStages stages;  // this job's (the backend's calls are counted by TimedBackend)
  uint64_t input_bytes_decoded = 0;
  double max_rel_l2 = 0;
  std::string backend;
  StepPool* steps = nullptr;  // run_jobs' pool of step buffers
  const DigestWeights* digest = nullptr;  // run_jobs' digest key (used where digest_steps says)
};

// Seconds between consecutive stages of one job: next() is the time since the last call
// (or since construction). Two steady_clock reads per stage, nothing shared.
class Lap {
 public:
  double next() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - t_).count();
    t_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point t_ = std::chrono::steady_clock::now();
};

// One unit of work (a tensor, an expert, a GGUF tensor or pack part) and the host memory
// its buffers hold at most while it runs.
struct Job {
  uint64_t memory = 0;
  std::function<void(Sink&)> run;
};

// Steps of the streaming checks: each job holds a few buffers of at most this many input
// codes (FP8), output elements (MXFP4, ggml) or bytes (copies), so a job's memory is tens
// of MiB whatever the tensor size (experts: one expert's matrices, as before).
constexpr uint64_t kStepElems = uint64_t{4} << 20;
constexpr uint64_t kCopyStep = uint64_t{16} << 20;
// Bytes per step of a copy check (each side): the job memory and the loop use the same.
uint64_t copy_step(uint64_t chunk) { return std::max<uint64_t>(1, std::min(chunk, kCopyStep)); }

// The first i in [0, n) with bad(i), or nullopt: ranges on all cores, the smallest wins.
template <class Bad>
std::optional<uint64_t> first_index(uint64_t n, Bad bad) {
  constexpr uint64_t kNone = UINT64_MAX;
  const uint64_t first = tbb::parallel_reduce(
      tbb::blocked_range<uint64_t>(0, n, 65536), kNone,
      [&](const tbb::blocked_range<uint64_t>& r, uint64_t best) {
        for (uint64_t i = r.begin(); i < r.end() && i < best; ++i)
          if (bad(i)) return i;
        return best;
      },
      [](uint64_t a, uint64_t b) { return std::min(a, b); });
  return first == kNone ? std::nullopt : std::optional<uint64_t>(first);
}

// Runs fn(c0, cols, blocks...) for blocks of the columns of m x n row-major outputs on all
// cores: each block computes into its own m x cols buffers (one per output), copied into
// the outputs' columns [c0, c0 + cols). Every output element is computed by one call.
template <class Fn, class... T>
void for_column_blocks(uint64_t m, uint64_t n, Fn fn, std::vector<T>&... outputs) {
  constexpr uint64_t kCols = 64;
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, (n + kCols - 1) / kCols, 1), [&](const tbb::blocked_range<uint64_t>& r) {
    for (uint64_t b = r.begin(); b < r.end(); ++b) {
      const uint64_t c0 = b * kCols, cols = std::min(kCols, n - c0);
      std::tuple<std::vector<T>...> blocks{std::vector<T>(m * cols)...};
      std::apply([&](auto&... blk) { fn(c0, cols, std::span(blk)...); }, blocks);
      auto scatter = [&](const auto& blk, auto& out) {
        for (uint64_t row = 0; row < m; ++row)
          std::copy_n(blk.begin() + row * cols, cols, out.begin() + row * n + c0);
      };
      std::apply([&](const auto&... blk) { (scatter(blk, outputs), ...); }, blocks);
    }
  });
}

// The original MXFP4 weight of every (scale byte b, code c): lut_x2[c] · 2^(b − 128) in
// double, then to float (exact, subnormals included, or infinite beyond binary32); code 8
// is −0. A table, built once: the per-element products (some subnormal) were the cost.
struct Mxfp4ValueTable {
  float v[256][16];
  Mxfp4ValueTable() {
    for (int b = 0; b < 256; ++b)
      for (int c = 0; c < 16; ++c) {
        const double mag = std::ldexp(std::abs(static_cast<double>(kE2m1LutX2[c])), b - 128);
        v[b][c] = static_cast<float>((c & 8) ? -mag : mag);
      }
  }
};
const Mxfp4ValueTable& mxfp4_value_table() {
  static const Mxfp4ValueTable table;
  return table;
}

// The shared state of one verification and the helpers every mode uses.
class Verifier {
 public:
  Verifier(DecodeBackend& backend, const VerifyOptions& o, Sink& r) : be_(backend), o_(o), r_(r) {}

 protected:
  VerifyCheck& add_check(std::string check, std::string tensor, std::string part, uint64_t elements) {
    r_.checks.push_back(VerifyCheck{std::move(check), std::move(tensor), std::move(part), elements, true, std::nullopt});
    return r_.checks.back();
  }
  void mismatch(VerifyCheck& c, const std::string& file, std::optional<uint64_t> offset, const std::string& message) {
    c.ok = false;
    r_.findings.error("VERIFY_MISMATCH", file, c.tensor, offset, message);
  }
  bool backend_failed(VerifyCheck& c, const std::string& file, const std::string& error) {
    c.ok = false;
    r_.findings.error(error.starts_with("unsupported") ? "VERIFY_UNSUPPORTED" : "VERIFY_BACKEND", file, c.tensor,
                      std::nullopt, r_.backend + ": " + error);
    return false;
  }
  bool read(const MappedFile& f, uint64_t offset, std::span<uint8_t> buf) {
    IoError err;
    Lap lap;
    const bool ok = f.read_at(offset, buf, err);
    r_.stages.read += lap.next();
    if (ok) return true;
    r_.findings.error("IO_READ", err.path, "", offset, err.message);
    return false;
  }
  uint64_t chunk_bytes() const { return std::max<uint64_t>(1, be_.max_chunk_bytes()); }
  // Fail closed: digests that disagree over results compared equal element by element mean a
  // broken digest kernel. `step`: where the step starts ("the step at byte N", "expert 3").
  void digest_kernel_wrong(VerifyCheck& c, const std::string& file, const std::string& step, const char* results) {
    backend_failed(c, file,
                   "the device's digest of " + step + " disagrees with the CPU's while its " + results +
                       ": the digest kernel is wrong");
  }
  static std::string step_at(uint64_t offset) { return "the step at byte " + std::to_string(offset); }

  DecodeBackend& be_;
  const VerifyOptions& o_;
  Sink& r_;
};

// ---- safetensors: FP8 pairs, copies and INT8-shift experts ---------------------------

// Rows per step of the FP8 and MXFP4 checks: at most kStepElems codes (elements) and
// `chunk` input bytes, at least one row. The job memory below and the loops use the same.
uint64_t fp8_rows_per_step(uint64_t cols, uint64_t chunk) {
  return std::max<uint64_t>(1, std::min(chunk, kStepElems) / std::max<uint64_t>(1, cols));
}
uint64_t mxfp4_rows_per_step(uint64_t k, uint64_t chunk) {
  return std::max<uint64_t>(1, std::min(2 * chunk, kStepElems) / std::max<uint64_t>(1, k));
}

uint64_t fp8_job_memory(const ModelTensor& src, const ModelTensor& scale, uint64_t chunk) {
  const uint64_t cols = src.shape.size() > 1 ? std::max<uint64_t>(1, src.shape[1]) : 1;
  const uint64_t step = std::min(src.nbytes, fp8_rows_per_step(cols, chunk) * cols);
  return 4 * scale.nbytes + 7 * step;  // grid (as read, as f32 and its bytes); codes, BF16 got/want/bytes
}

// Elements per row of a DeepSeek MXFP4 weight [rows, k/2] (0 when it has no second dimension).
uint64_t mxfp4_k(const ModelTensor& w) { return w.shape.size() > 1 ? w.shape[1] * 2 : 0; }

// An MXFP4 weight of `nbytes` code bytes in rows of k elements (verify_mxfp4_bf16).
uint64_t mxfp4_job_memory(uint64_t nbytes, uint64_t k, uint64_t chunk) {
  k = std::max<uint64_t>(1, k);
  const uint64_t elems = std::min(nbytes * 2, mxfp4_rows_per_step(k, chunk) * k);
  return elems / 2 + elems / 32 + 2 * elems + 4 * elems;  // codes, scales, OUT's BF16, f32
}

// Rows per step of the original-weight check (verify_mxfp4): at most 1M f32 results.
uint64_t original_step_rows(uint64_t k) { return std::max<uint64_t>(1, (uint64_t{1} << 20) / std::max<uint64_t>(1, k)); }

// Columns [32·kb0, 32·(kb0 + blocks)) of an INT8-shift expert's slabs as an expert of its
// own. The slabs run 32-block by 32-block (tile (kb, g) is byte (kb·G + g)·128, shift byte
// ((kb / 4)·G + g)·8 + r), so for kb0 a multiple of 4 the piece's tiles and shift bytes are
// one contiguous run each, which starts where the slabs of the columns before it would end.
struct DecodePiece {
  RemapParams p;
  std::span<const uint8_t> mxfp4, shift2;
};
DecodePiece decode_piece(const RemapParams& p, const Slabs& s, uint64_t kb0, uint64_t blocks) {
  RemapParams before = p, piece = p;
  before.k = 32 * kb0;
  piece.k = 32 * blocks;
  return {piece, std::span<const uint8_t>(s.mxfp4).subspan(remap_mxfp4_bytes(before), remap_mxfp4_bytes(piece)),
          std::span<const uint8_t>(s.shift2).subspan(remap_shift2_bytes(before), remap_shift2_bytes(piece))};
}
// 32-blocks per piece: a multiple of 4 (whole shift bytes) with about `bytes` of decode per
// side (VerifyOptions::decode_piece_bytes), so both decodes and their comparison stay in a
// core's L2 (a whole 4096 x 4096 expert's two 16 MiB decodes went through main memory three
// times).
uint64_t decode_piece_blocks(const RemapParams& p, uint64_t bytes) {
  const uint64_t blocks = bytes / (32 * std::max<uint64_t>(1, p.rows));
  return std::max<uint64_t>(4, blocks / 4 * 4);
}
// An element where the two decodes differ.
struct DecodeDifference {
  uint64_t row, column;
  int device, cpu;
  bool before(const DecodeDifference& o) const { return row != o.row ? row < o.row : column < o.column; }
};

// One expert of an INT8-shift matrix: its source parts, the slabs got and wanted, the CPU
// and device decodes (also where digests are compared: a differing digest decodes both);
// with the GEMM check the backend's decode, activations (f32, two int8 and an int16 copy), outputs
// (two int32 and two BF16 copies, the doubles) and, against IN, one step of the device's
// original weights and one 64-row column block of them for the double product.
uint64_t expert_job_memory(const RemapParams& p, bool reference, bool gemm, uint64_t tokens) {
  const uint64_t nk = p.rows * p.k, slabs = remap_mxfp4_bytes(p) + remap_shift2_bytes(p) + p.rows * 4;
  uint64_t m = (reference ? 2 * slabs + nk / 2 + nk / 32 : slabs) + 2 * nk;
  if (gemm) {
    m += nk + tokens * p.k * 8 + tokens * p.rows * 20;
    if (reference) m += 4 * std::min(p.rows, original_step_rows(p.k)) * p.k + 4 * 64 * p.k;
  }
  return m;
}

// ---- gpt-oss MXFP4 experts of a --experts bf16 conversion ----------------------------
//
// OUT's X [E, K, R] BF16 (mlp.experts.gate_up_proj [E, H, 2I], down_proj [E, I, H]) is IN's
// X_blocks [E, R, K/32, 16] with X_scales [E, R, K/32] dequantized, then transposed:
// out[e][c][r] = deq(blocks[e][r][c]). One job per expert: the device decodes the expert's
// [R, K/2] + [R, K/32] rows (the DeepSeek MXFP4 layout, DecodeBackend::mxfp4_to_f32) in steps
// of at most max_chunk_bytes(), the host rounds the f32 results to BF16 (exact: every finite
// product is a BF16 value) and transposes them; that must equal the CPU reference (the
// decoder convert uses, numerics/mxfp4.h dequant_mxfp4_transposed) and OUT's bytes, bit for bit.
class GptOssExpertVerifier : public Verifier {
 public:
  GptOssExpertVerifier(DecodeBackend& backend, const VerifyOptions& o, Sink& r) : Verifier(backend, o, r) {}

  // One expert's buffers: its blocks and scales, the device result (BF16, transposed), OUT's
  // bytes, the CPU reference and its row-major scratch (2 bytes per element each), one f32 step.
  static uint64_t job_memory(const PlannedTensor& pt, uint64_t chunk) {
    const uint64_t nk = pt.rows * pt.k;
    return nk / 2 + nk / 32 + 8 * nk + 4 * step_rows(pt, chunk) * pt.k;
  }

  // The jobs of one planned gpt-oss tensor; a layout that does not match (an OUT tensor of
  // the right byte size but another shape) is one failing check, not a crash.
  static void plan(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& in, const LoadedModel& out,
                   const PlannedTensor& pt, const ModelTensor& dst, std::vector<Job>& jobs) {
    const ModelTensor& w = in.view.tensors[pt.input];
    const ModelTensor& s = in.view.tensors[pt.scale];
    const uint64_t experts = std::max<uint64_t>(1, pt.experts), nk = pt.rows * pt.k;
    const bool ok = pt.rows != 0 && pt.k != 0 && pt.k % 32 == 0 && w.payload_ok && s.payload_ok &&
                    w.nbytes == experts * nk / 2 && s.nbytes == experts * nk / 32 && dst.nbytes == experts * nk * 2 &&
                    dst.shape.size() >= 2 && dst.shape[dst.shape.size() - 2] == pt.k && dst.shape.back() == pt.rows;
    if (!ok) {
      jobs.push_back({0, [&be, &o, &out, &dst](Sink& sink) {
                        GptOssExpertVerifier v(be, o, sink);
                        VerifyCheck& c = v.add_check("mxfp4_dequant", dst.name, "", 0);
                        c.ok = false;
                        sink.findings.error("VERIFY_LAYOUT", out.view.file_of(dst), dst.name, std::nullopt,
                                            "BF16 gpt-oss expert tensor does not match its MXFP4 _blocks/_scales "
                                            "[E, R, K/32, 16] / [E, R, K/32] (expected [E, K, R])");
                      }});
      return;
    }
    for (uint64_t e = 0; e < experts; ++e)
      jobs.push_back({job_memory(pt, be.max_chunk_bytes()), [&be, &o, &in, &out, &pt, &w, &s, &dst, e](Sink& sink) {
                        GptOssExpertVerifier(be, o, sink).verify_expert(in, out, pt, w, s, dst, e);
                      }});
  }

 private:
  static uint64_t step_rows(const PlannedTensor& pt, uint64_t chunk) {
    const uint64_t k = std::max<uint64_t>(1, pt.k);
    return std::clamp<uint64_t>(std::min(std::max<uint64_t>(1, chunk) / std::max<uint64_t>(1, k / 2), kStepElems / k), 1,
                                std::max<uint64_t>(1, pt.rows));
  }
  static const MappedFile& file_of(const LoadedModel& m, const ModelTensor& t) { return m.checkpoint.shards[t.file].file; }
  static uint16_t le16(const std::vector<uint8_t>& b, uint64_t i) {
    return static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8));
  }

  void verify_expert(const LoadedModel& in, const LoadedModel& out, const PlannedTensor& pt, const ModelTensor& w,
                     const ModelTensor& s, const ModelTensor& dst, uint64_t e) {
    const uint64_t rows = pt.rows, k = pt.k, nk = rows * k;
    const std::string part = "expert " + std::to_string(e);
    const std::string out_file = out.view.file_of(dst), in_file = in.view.file_of(w);
    VerifyCheck& c = add_check("mxfp4_dequant", dst.name, part, nk);
    std::vector<uint8_t> blocks(nk / 2), scales(nk / 32), got(2 * nk), want(2 * nk), device(2 * nk), scratch;
    if (!read(file_of(in, w), w.offset + e * (nk / 2), blocks) || !read(file_of(in, s), s.offset + e * (nk / 32), scales) ||
        !read(file_of(out, dst), dst.offset + e * 2 * nk, got))
      return void(c.ok = false);
    // The CPU reference first: input convert refuses (E8M0 0xFF, a product beyond BF16) has
    // no converted value to compare with.
    if (auto fault = dequant_mxfp4_transposed(blocks, scales, rows, k, e * rows, scratch, want)) {
      c.ok = false;
      const uint64_t i = fault->element >= e * nk ? fault->element - e * nk : 0;
      r_.findings.error("VERIFY_INPUT", in_file, w.name, w.offset + e * (nk / 2) + i / 2,
                        part + ": the input blocks cannot be dequantized (" + mxfp4_fault_name(fault->kind) +
                            " at row " + std::to_string(i / k) + ", column " + std::to_string(i % k) + ")");
      return;
    }
    scratch = {};
    // The device, in steps of whole rows; each f32 result rounded to BF16 and put at [c][r].
    const uint64_t step = step_rows(pt, chunk_bytes());
    std::vector<float> f(step * k);
    for (uint64_t r0 = 0; r0 < rows; r0 += step) {
      const uint64_t n = std::min(step, rows - r0);
      std::string error;
      if (!be_.mxfp4_to_f32(std::span<const uint8_t>(blocks).subspan(r0 * k / 2, n * k / 2),
                            std::span<const uint8_t>(scales).subspan(r0 * k / 32, n * k / 32), n, k,
                            std::span<float>(f.data(), n * k), error))
        return void(backend_failed(c, out_file, error));
      r_.input_bytes_decoded += n * k / 2 + n * k / 32;
      tbb::parallel_for(tbb::blocked_range<uint64_t>(0, n, 16), [&](const tbb::blocked_range<uint64_t>& rr) {
        for (uint64_t r = rr.begin(); r < rr.end(); ++r)
          for (uint64_t col = 0; col < k; ++col) {
            const uint16_t b = bf16_from_float_rne(f[r * k + col]);
            const uint64_t o = 2 * (col * rows + r0 + r);
            device[o] = static_cast<uint8_t>(b & 0xFF);
            device[o + 1] = static_cast<uint8_t>(b >> 8);
          }
      });
    }
    // Element i of the expert's [K, R] matrix is input row i % R, column i / R.
    auto where = [&](uint64_t i) {
      return part + " element [" + std::to_string(i / rows) + ", " + std::to_string(i % rows) + "] of its [" +
             std::to_string(k) + ", " + std::to_string(rows) + "] matrix (tensor element " + std::to_string(e * nk + i) +
             "; input " + w.name + " row " + std::to_string(i % rows) + ", column " + std::to_string(i / rows) + ")";
    };
    auto value = [](uint16_t b) { return hex(b, 4) + " (" + fmt(bf16_value(b)) + ")"; };
    if (auto d = first_difference<uint8_t>(device, want)) {
      const uint64_t i = *d / 2, r = i % rows, col = i / rows;
      mismatch(c, in_file, w.offset + e * (nk / 2) + r * (k / 2) + col / 2,
               where(i) + ": device MXFP4 decode " + value(le16(device, i)) + " vs CPU reference " + value(le16(want, i)));
      return;
    }
    if (auto d = first_difference<uint8_t>(device, got)) {
      const uint64_t i = *d / 2;
      mismatch(c, out_file, dst.offset + e * 2 * nk + 2 * i,
               where(i) + ": device MXFP4 decode " + value(le16(device, i)) + " (= CPU reference) vs converted " +
                   value(le16(got, i)));
    }
  }
};

class CheckpointVerifier : public Verifier {
 public:
  CheckpointVerifier(DecodeBackend& backend, const VerifyOptions& o, Sink& r) : Verifier(backend, o, r) {}

  // OUT against the conversion plan of IN: one job per tensor, one per expert of a fused
  // INT8-shift matrix.
  static void plan_converted(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& in, const LoadedModel& out,
                             const ConversionPlan& plan, std::vector<Job>& jobs) {
    for (const auto& shard : plan.shards) {
      for (size_t i = 0; i < shard.tensors.size(); ++i) {
        const PlannedTensor& pt = shard.tensors[i];
        const ModelTensor* dst = out.view.find(shard.writer_tensors[i].name);
        // Missing or mis-sized tensors are findings of the reference check already made.
        if (dst == nullptr || !dst->payload_ok || dst->nbytes != shard.writer_tensors[i].nbytes) continue;
        // A job running one member check on this tensor.
        auto job = [&](uint64_t memory, void (CheckpointVerifier::*check)(const LoadedModel&, const LoadedModel&,
                                                                          const ConversionPlan&, const PlannedTensor&,
                                                                          const ModelTensor&)) {
          jobs.push_back({memory, [&be, &o, &in, &out, &plan, &pt, dst, check](Sink& s) {
                            CheckpointVerifier v(be, o, s);
                            v.in_ = &in;
                            (v.*check)(in, out, plan, pt, *dst);
                          }});
        };
        switch (pt.action) {
          case TensorAction::copy:
            job(2 * std::min(copy_step(be.max_chunk_bytes()), dst->nbytes), &CheckpointVerifier::planned_copy);
            break;
          case TensorAction::dequant_e8m0:
          case TensorAction::dequant_f32:
            job(fp8_job_memory(in.view.tensors[pt.input], in.view.tensors[pt.scale], be.max_chunk_bytes()),
                &CheckpointVerifier::planned_fp8);
            break;
          case TensorAction::dequant_mxfp4:
            job(mxfp4_job_memory(in.view.tensors[pt.input].nbytes, mxfp4_k(in.view.tensors[pt.input]), be.max_chunk_bytes()),
                &CheckpointVerifier::planned_mxfp4);
            break;
          case TensorAction::remap_mxfp4: {
            const FusedMatrix& fm = plan.fused[pt.fused];
            const std::string stem = fm.block + ".ffn.experts." + fm.matrix;
            const ModelTensor* sh = out.view.find(stem + ".shift2");
            const ModelTensor* cs = out.view.find(stem + ".channel_scale");
            if (!sh || !cs || !sh->payload_ok || !cs->payload_ok) break;  // reported by the reference check
            for (uint64_t e = 0; e < fm.experts; ++e) {
              const bool gemm = o.gemm_experts == 0 || e < o.gemm_experts;
              jobs.push_back({expert_job_memory(fm.params, true, gemm, o.tokens),
                              [&be, &o, &in, &out, &fm, dst, sh, cs, e](Sink& s) {
                                CheckpointVerifier v(be, o, s);
                                v.in_ = &in;
                                v.verify_fused_expert(in, out, fm, *dst, *sh, *cs, e);
                              }});
            }
            break;
          }
          case TensorAction::remap_shift2:
          case TensorAction::remap_channel_scale: break;  // checked with their .mxfp4 tensor
          case TensorAction::dequant_mxfp4_blocks:  // gpt-oss experts: one job per expert
            GptOssExpertVerifier::plan(be, o, in, out, pt, *dst, jobs);
            break;
        }
      }
    }
  }

  // A checkpoint alone: its FP8 pairs (device against CPU) and its INT8-shift experts.
  static void plan_self(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model, const ConversionPlan* plan,
                        std::vector<Job>& jobs) {
    if (plan) {
      for (const auto& shard : plan->shards)
        for (const auto& pt : shard.tensors) {
          const ModelTensor& src = model.view.tensors[pt.input];
          if (pt.action == TensorAction::dequant_e8m0 || pt.action == TensorAction::dequant_f32) {
            jobs.push_back({fp8_job_memory(src, model.view.tensors[pt.scale], be.max_chunk_bytes()),
                            [&be, &o, &model, plan, &pt, &src](Sink& s) {
                              CheckpointVerifier v(be, o, s);
                              v.in_ = &model;
                              v.verify_fp8(model, *plan, pt, src, nullptr, nullptr);
                            }});
          } else if (pt.action == TensorAction::dequant_mxfp4 || pt.action == TensorAction::dequant_mxfp4_blocks) {
            // A DeepSeek routed expert [rows, k/2], or a gpt-oss _blocks tensor: its E·R rows of K.
            const bool blocks = pt.action == TensorAction::dequant_mxfp4_blocks;
            const uint64_t rows = blocks ? std::max<uint64_t>(1, pt.experts) * pt.rows : (src.shape.empty() ? 0 : src.shape[0]);
            const uint64_t k = blocks ? pt.k : mxfp4_k(src);
            jobs.push_back({mxfp4_job_memory(src.nbytes, k, be.max_chunk_bytes()), [&be, &o, &model, &pt, &src, rows, k](Sink& s) {
                              CheckpointVerifier(be, o, s).verify_mxfp4_bf16(model, src, model.view.tensors[pt.scale],
                                                                             rows, k, nullptr, nullptr);
                            }});
          }
        }
    }
    auto error_job = [&jobs](std::string file, std::string tensor, std::string message) {
      jobs.push_back({0, [file, tensor, message](Sink& s) {
                        s.findings.error("VERIFY_LAYOUT", file, tensor, std::nullopt, message);
                      }});
    };
    for (const auto& t : model.view.tensors) {
      if (!t.name.ends_with(".mxfp4") || !(t.name.find(".ffn.experts.") != std::string::npos)) continue;
      const std::string stem = t.name.substr(0, t.name.size() - 6);
      const ModelTensor* sh = model.view.find(stem + ".shift2");
      const ModelTensor* cs = model.view.find(stem + ".channel_scale");
      if (!sh || !cs || t.shape.size() != 4 || cs->shape.size() != 2 || !t.payload_ok || !sh->payload_ok ||
          !cs->payload_ok) {
        error_job(model.view.file_of(t), t.name,
                  "INT8-shift tensor without matching .shift2 / .channel_scale of the expected ranks");
        continue;
      }
      RemapParams p;
      p.rows = cs->shape[1];
      p.k = t.shape[1] * 32;
      const uint64_t experts = t.shape[0];
      if (experts == 0 || p.rows == 0 || t.nbytes != experts * remap_mxfp4_bytes(p) ||
          sh->nbytes != experts * remap_shift2_bytes(p) || cs->nbytes != experts * p.rows * 4) {
        error_job(model.view.file_of(t), t.name, "INT8-shift tensor sizes disagree with [E, K/32, ceil(N/8), 128] / [E, N]");
        continue;
      }
      for (uint64_t e = 0; e < experts; ++e) {
        const bool gemm = o.gemm_experts == 0 || e < o.gemm_experts;
        jobs.push_back({expert_job_memory(p, false, gemm, o.tokens), [&be, &o, &model, &t, sh, cs, p, e, gemm](Sink& s) {
                          CheckpointVerifier v(be, o, s);
                          v.in_ = &model;
                          PooledSteps bufs(s.steps, true);
                          ExpertBuffers& b = *bufs->expert;
                          Lap lap;
                          v.size_slabs(p, b.got);
                          s.stages.buffers += lap.next();
                          if (!v.read_slabs(model, t, *sh, *cs, e, b.got)) return;
                          if (!v.verify_decode(model.view.file_of(t), t.name, e, p, b, gemm)) return;
                          if (gemm) v.verify_gemm(model.view.file_of(t), t.name, e, p, b, nullptr);
                        }});
      }
    }
  }

 private:
  const MappedFile& file_of(const LoadedModel& m, const ModelTensor& t) { return m.checkpoint.shards[t.file].file; }

  void planned_copy(const LoadedModel& in, const LoadedModel& out, const ConversionPlan&, const PlannedTensor& pt,
                    const ModelTensor& dst) {
    verify_copy(in, out, in.view.tensors[pt.input], dst);
  }
  void planned_fp8(const LoadedModel& in, const LoadedModel& out, const ConversionPlan& plan, const PlannedTensor& pt,
                   const ModelTensor& dst) {
    verify_fp8(in, plan, pt, in.view.tensors[pt.input], &out, &dst);
  }
  void planned_mxfp4(const LoadedModel& in, const LoadedModel& out, const ConversionPlan&, const PlannedTensor& pt,
                     const ModelTensor& dst) {
    const ModelTensor& w = in.view.tensors[pt.input];
    verify_mxfp4_bf16(in, w, in.view.tensors[pt.scale], w.shape.empty() ? 0 : w.shape[0], mxfp4_k(w), &out, &dst);
  }

  void verify_copy(const LoadedModel& in, const LoadedModel& out, const ModelTensor& src, const ModelTensor& dst) {
    VerifyCheck& c = add_check("copy", dst.name, "", src.nbytes);
    PooledSteps bufs(r_.steps);
    const uint64_t step = std::min(copy_step(chunk_bytes()), src.nbytes);
    const std::span<uint8_t> a = StepBuffers::take(bufs->a, step), b = StepBuffers::take(bufs->b, step);
    for (uint64_t done = 0; done < src.nbytes; done += a.size()) {
      const uint64_t n = std::min<uint64_t>(a.size(), src.nbytes - done);
      std::span<uint8_t> sa(a.data(), n), sb(b.data(), n);
      if (!read(file_of(in, src), src.offset + done, sa) || !read(file_of(out, dst), dst.offset + done, sb)) {
        c.ok = false;
        return;
      }
      if (auto i = first_difference<uint8_t>(sa, sb)) {
        mismatch(c, out.view.file_of(dst), dst.offset + done + *i,
                 "copied tensor differs from the input at byte " + std::to_string(done + *i) + ": " +
                     hex(b[*i], 2) + " vs input " + hex(a[*i], 2));
        return;
      }
    }
  }

  // Device dequantization of an FP8 weight. With `out`, it must equal OUT's BF16 bytes;
  // without, the CPU dequantization of the same input.
  void verify_fp8(const LoadedModel& in, const ConversionPlan& plan, const PlannedTensor& pt, const ModelTensor& src,
                  const LoadedModel* out, const ModelTensor* dst) {
    const std::string tensor = dst ? dst->name : src.name;
    const std::string file = dst ? out->view.file_of(*dst) : in.view.file_of(src);
    VerifyCheck& c = add_check("fp8_dequant", tensor, "", src.nbytes);
    const ModelTensor& scale = in.view.tensors[pt.scale];
    std::vector<uint8_t> grid(scale.nbytes);
    if (!read(file_of(in, scale), scale.offset, grid)) return void(c.ok = false);
    const Fp8Grid g = planned_fp8_grid(plan, pt, src);
    const Fp8ScaleKind kind = pt.action == TensorAction::dequant_e8m0 ? Fp8ScaleKind::e8m0 : Fp8ScaleKind::f32;
    // Multipliers reach both sides as F32 (BF16/F16 scales widened exactly, model/pairing.h).
    std::vector<float> grid_f32;
    if (kind == Fp8ScaleKind::f32) {
      if (!scale.dtype || !scale_grid_to_f32(*scale.dtype, grid, grid_f32)) return void(c.ok = false);
      grid.resize(4 * grid_f32.size());
      if (!grid_f32.empty()) std::memcpy(grid.data(), grid_f32.data(), grid.size());
    }
    const uint64_t rows_per_step = fp8_rows_per_step(g.cols, chunk_bytes());
    PooledSteps bufs(r_.steps);
    const uint64_t step = std::min(rows_per_step, g.rows) * g.cols;
    const std::span<uint8_t> w = StepBuffers::take(bufs->a, step), want_bytes = StepBuffers::take(bufs->b, 2 * step);
    const std::span<uint16_t> got = StepBuffers::take(bufs->h1, step), want = StepBuffers::take(bufs->h2, step);
    // A conversion's BF16 is compared by digest where the backend has one (16 bytes back per
    // step); a step whose digests differ is compared element by element below.
    const bool digest = out && bf16_digest_steps(step);
    for (uint64_t row = 0; row < g.rows; row += rows_per_step) {
      const uint64_t rows = std::min(rows_per_step, g.rows - row), n = rows * g.cols;
      std::span<uint8_t> ws(w.data(), n);
      if (!read(file_of(in, src), src.offset + row * g.cols, ws)) return void(c.ok = false);
      std::string error;
      std::span<uint8_t> wb(want_bytes.data(), 2 * n);
      if (digest) {
        if (!read(file_of(*out, *dst), dst->offset + row * g.cols * 2, wb)) return void(c.ok = false);
        F32Digest device;
        if (!be_.fp8_bf16_digest(ws, row, g, kind, grid, *r_.digest, device, error))
          return void(backend_failed(c, file, error));
        r_.input_bytes_decoded += n;
        if (digests_agree(device, wb)) continue;
      }
      if (!be_.fp8_to_bf16(ws, row, g, kind, grid, std::span<uint16_t>(got.data(), n), error))
        return void(backend_failed(c, file, error));
      if (!digest) r_.input_bytes_decoded += n;
      if (out) {  // OUT's bytes (already read for the digest)
        if (!digest && !read(file_of(*out, *dst), dst->offset + row * g.cols * 2, wb)) return void(c.ok = false);
      } else {
        auto fault = kind == Fp8ScaleKind::e8m0 ? dequant_fp8_rows_e8m0(ws, row, g, grid, wb)
                                                : dequant_fp8_rows_f32(ws, row, g, grid_f32, wb);
        if (fault) {
          c.ok = false;
          r_.findings.error("VERIFY_INPUT", file, tensor, src.offset + row * g.cols + fault->element % n,
                            std::string("FP8 tensor cannot be dequantized: ") + fp8_fault_name(fault->kind));
          return;
        }
      }
      std::memcpy(want.data(), want_bytes.data(), 2 * n);
      if (auto i = first_difference<uint16_t>(std::span<const uint16_t>(got.data(), n), std::span<const uint16_t>(want.data(), n))) {
        const uint64_t element = row * g.cols + *i;
        const std::optional<uint64_t> offset =
            out ? std::optional<uint64_t>(dst->offset + element * 2) : std::optional<uint64_t>(src.offset + element);
        mismatch(c, file, offset,
                 "element " + std::to_string(element) + " (row " + std::to_string(element / g.cols) + ", column " +
                     std::to_string(element % g.cols) + "): device dequant " + hex(got[*i], 4) + " (" +
                     fmt(bf16_value(got[*i])) + ") vs " + (out ? "converted " : "CPU ") + hex(want[*i], 4) + " (" +
                     fmt(bf16_value(want[*i])) + ")");
        return;
      }
      if (digest)
        return void(digest_kernel_wrong(c, file, step_at(dst->offset + row * g.cols * 2),
                                        "BF16 results equal the converted bytes"));
    }
  }

  // Whether BF16 steps of `elems` elements are compared by digest (DecodeBackend::has_bf16_digest).
  bool bf16_digest_steps(uint64_t elems) const {
    return be_.has_bf16_digest() && !o_.full_compare && r_.digest && elems <= kDigestMaxElems;
  }
  // The device's digest of a step against the CPU's of OUT's BF16 bytes (counted in compare).
  bool digests_agree(const F32Digest& device, std::span<const uint8_t> out_bytes) {
    Lap lap;
    const bool same = device == bf16_digest(out_bytes, 0, *r_.digest);
    r_.stages.compare += lap.next();
    return same;
  }

  // A [rows, k] MXFP4 weight of IN (a routed expert; a gpt-oss _blocks tensor as its E·R
  // rows of K) decoded by the device and rounded to BF16 (exact: every finite product is a
  // BF16 value), step by step, against OUT's BF16 bytes of a --experts bf16 conversion
  // (`out`, `dst`) or, for a checkpoint alone (`dst` null), the CPU's exact BF16 of the same
  // bytes (numerics/mxfp4.h, the decoder convert uses).
  void verify_mxfp4_bf16(const LoadedModel& in, const ModelTensor& w, const ModelTensor& s, uint64_t rows, uint64_t k,
                         const LoadedModel* out, const ModelTensor* dst) {
    const ModelTensor& named = dst ? *dst : w;
    const std::string file = dst ? out->view.file_of(*dst) : in.view.file_of(w);
    VerifyCheck& c = add_check("mxfp4_dequant", named.name, "", rows * k);
    if (rows == 0 || k == 0 || k % 32 || w.nbytes != rows * k / 2 || s.nbytes != rows * k / 32 ||
        (dst && dst->nbytes != rows * k * 2)) {
      c.ok = false;
      r_.findings.error("VERIFY_LAYOUT", file, named.name, std::nullopt,
                        dst ? "BF16 expert shape does not match its MXFP4 source"
                            : "MXFP4 weight and scale sizes do not make a [" + std::to_string(rows) + ", " +
                                  std::to_string(k) + "] matrix");
      return;
    }
    const uint64_t rows_per_step = mxfp4_rows_per_step(k, chunk_bytes());
    PooledSteps bufs(r_.steps);
    const uint64_t step = std::min(rows_per_step, rows) * k / 2;  // bytes of codes
    const std::span<uint8_t> wb = StepBuffers::take(bufs->a, step), sb = StepBuffers::take(bufs->b, step / 16),
                             ob = StepBuffers::take(bufs->c, step * 4);
    const bool digest = bf16_digest_steps(std::min(rows_per_step, rows) * k);
    const char* wanted = dst ? "converted" : "CPU reference";
    for (uint64_t row = 0; row < rows; row += rows_per_step) {
      const uint64_t n = std::min(rows_per_step, rows - row), elems = n * k;
      std::span<uint8_t> ws(wb.data(), elems / 2), ss(sb.data(), elems / 32), os(ob.data(), elems * 2);
      if (!read(file_of(in, w), w.offset + row * k / 2, ws) || !read(file_of(in, s), s.offset + row * k / 32, ss) ||
          (dst && !read(file_of(*out, *dst), dst->offset + row * k * 2, os)))
        return void(c.ok = false);
      if (!dst) {
        if (auto fault = dequant_mxfp4_rows(ws, ss, k, row, os)) {  // E8M0 0xFF, or beyond BF16
          c.ok = false;
          r_.findings.error("VERIFY_INPUT", file, w.name, w.offset + fault->element / 2,
                            "element " + std::to_string(fault->element) + " (row " + std::to_string(fault->element / k) +
                                ", column " + std::to_string(fault->element % k) + ") cannot be dequantized (" +
                                mxfp4_fault_name(fault->kind) + ")");
          return;
        }
      }
      std::string error;
      r_.input_bytes_decoded += ws.size() + ss.size();
      if (digest) {  // 16 bytes back instead of every f32; a differing step compared below
        F32Digest device;
        if (!be_.mxfp4_bf16_digest(ws, ss, n, k, *r_.digest, device, error)) return void(backend_failed(c, file, error));
        if (digests_agree(device, os)) continue;
      }
      const std::span<float> f = StepBuffers::take(bufs->got, elems);  // only when every f32 is compared
      if (!be_.mxfp4_to_f32(ws, ss, n, k, f, error)) return void(backend_failed(c, file, error));
      auto got_of = [&](uint64_t i) { return bf16_from_float_rne(f[i]); };
      auto want_of = [&](uint64_t i) { return static_cast<uint16_t>(os[2 * i] | (os[2 * i + 1] << 8)); };
      if (auto bad = first_index(elems, [&](uint64_t i) { return got_of(i) != want_of(i); })) {
        const uint64_t i = *bad, element = row * k + i;
        const uint16_t got = got_of(i), want = want_of(i);
        mismatch(c, file, dst ? dst->offset + element * 2 : w.offset + element / 2,
                 "element " + std::to_string(element) + " (row " + std::to_string(element / k) + ", column " +
                     std::to_string(element % k) + "): device MXFP4 decode " + hex(got, 4) + " (" + fmt(bf16_value(got)) +
                     ") vs " + wanted + " " + hex(want, 4) + " (" + fmt(bf16_value(want)) + ")");
        return;
      }
      if (digest)
        return void(digest_kernel_wrong(c, file, step_at(dst ? dst->offset + row * k * 2 : w.offset + row * k / 2),
                                        dst ? "BF16 results equal the converted bytes" : "BF16 results equal the CPU's"));
    }
  }

  // One expert's slab sizes (buffers from the pool: resized, not cleared; every byte is
  // written by the read or the remap before it is compared).
  static void size_slabs(const RemapParams& p, Slabs& s) {
    s.mxfp4.resize(remap_mxfp4_bytes(p));
    s.shift2.resize(remap_shift2_bytes(p));
    s.channel_scale.resize(remap_channel_scale_bytes(p));
  }
  bool read_slabs(const LoadedModel& m, const ModelTensor& mx, const ModelTensor& sh, const ModelTensor& cs, uint64_t e,
                  Slabs& s) {
    return read(file_of(m, mx), mx.offset + e * s.mxfp4.size(), s.mxfp4) &&
           read(file_of(m, sh), sh.offset + e * s.shift2.size(), s.shift2) &&
           read(file_of(m, cs), cs.offset + e * s.channel_scale.size(), s.channel_scale);
  }

  // Element (row, column) of an mxfp4 slab byte and nibble (spec §4 inverted).
  static std::pair<uint64_t, uint64_t> tile_element(const RemapParams& p, uint64_t byte, bool high) {
    const uint64_t groups = (p.rows + 7) / 8, tile = byte / 128, t = byte % 128;
    const uint64_t kb = tile / groups, ng = tile % groups, lane = t / 4, lane_byte = t % 4;
    const uint64_t j = (lane % 4) * 2 + (lane_byte & 1) + (lane_byte / 2) * 8;
    return {ng * 8 + lane / 4, 32 * kb + 2 * j + (high ? 1 : 0)};
  }

  // Whether an expert's decode is compared by digest (DecodeBackend::has_int8_digest): not
  // where the GEMM check needs the CPU's q, nor past kDigestMaxElems words.
  bool decode_by_digest(const RemapParams& p, bool gemm) const {
    return !gemm && be_.has_int8_digest() && !o_.full_compare && r_.digest && p.rows * p.k / 4 <= kDigestMaxElems;
  }

  // The CPU decode of OUT's slabs against the device's; with `gemm` (the GEMM check follows
  // and needs it) the CPU's whole decode is kept in b.q_cpu. Where decode_by_digest, first
  // the two decodes' digests (16 bytes back, the CPU's decoded in cache); only when they
  // differ are both decoded and compared to name the element.
  bool verify_decode(const std::string& file, const std::string& tensor, uint64_t e, const RemapParams& p,
                     ExpertBuffers& b, bool gemm) {
    const bool digest = decode_by_digest(p, gemm);
    VerifyCheck& c = add_check("int8_shift_decode", tensor, "expert " + std::to_string(e), p.rows * p.k);
    const Slabs& got = b.got;
    const std::string expert = "expert " + std::to_string(e);
    auto cannot_decode = [&] {
      c.ok = false;
      r_.findings.error("VERIFY_LAYOUT", file, tensor, std::nullopt, expert + " cannot be decoded");
      return false;
    };
    Lap lap;
    std::string error;
    if (digest) {
      F32Digest cpu, device;
      if (!int8_shift_digest(got.mxfp4, got.shift2, p, *r_.digest, cpu)) return cannot_decode();
      r_.stages.cpu_reference += lap.next();
      if (!be_.int8_shift_digest(got.mxfp4, got.shift2, p, *r_.digest, device, error))
        return backend_failed(c, file, error);
      r_.input_bytes_decoded += got.mxfp4.size() + got.shift2.size();
      lap.next();  // the device's time: TimedBackend
      if (cpu == device) return true;
    }
    // Column pieces of the expert (whole shift bytes), each decoded on both sides and
    // compared while both are in cache; one piece when the whole CPU decode is kept.
    const uint64_t blocks = p.k / 32, piece_blocks = gemm ? blocks : decode_piece_blocks(p, o_.decode_piece_bytes);
    std::optional<DecodeDifference> first;  // the least (row, column) that differs
    for (uint64_t kb0 = 0; kb0 < blocks; kb0 += piece_blocks) {
      const DecodePiece piece = decode_piece(p, got, kb0, std::min(piece_blocks, blocks - kb0));
      std::vector<int8_t>&q_cpu = b.q_cpu, &q_dev = b.q_dev;
      // Pooled, not cleared: both decodes write every element (the device's output, like the
      // GPU backend's device buffers, holds the previous expert's values before the call).
      q_cpu.resize(piece.p.rows * piece.p.k);
      q_dev.resize(q_cpu.size());
      r_.stages.buffers += lap.next();
      if (!decode_int8_shift(piece.mxfp4, piece.shift2, piece.p, q_cpu)) return cannot_decode();
      r_.stages.cpu_reference += lap.next();
      if (!be_.decode_int8_shift(piece.mxfp4, piece.shift2, piece.p, q_dev, error)) return backend_failed(c, file, error);
      lap.next();  // the device's time: TimedBackend
      // The piece's first difference in its row-major order; the expert's is the least
      // (row, column) over the pieces.
      if (auto i = first_difference<int8_t>(q_dev, q_cpu)) {
        const DecodeDifference d{*i / piece.p.k, kb0 * 32 + *i % piece.p.k, q_dev[*i], q_cpu[*i]};
        if (!first || d.before(*first)) first = d;
      }
      r_.stages.compare += lap.next();
    }
    if (!digest) r_.input_bytes_decoded += got.mxfp4.size() + got.shift2.size();
    if (first) {
      mismatch(c, file, std::nullopt,
               expert + " row " + std::to_string(first->row) + " column " + std::to_string(first->column) +
                   ": device decode " + std::to_string(first->device) + " vs CPU " + std::to_string(first->cpu));
      return false;
    }
    if (digest) {
      digest_kernel_wrong(c, file, expert + "'s decode", "decode equals the CPU's");
      return false;
    }
    return true;
  }

  // Random activations (BF16-representable, like hidden states), quantized on both sides,
  // then the GEMM on both sides; with the original weights, the error against them.
  // With `original` (IN's MXFP4 parts of the expert), also the error against the original weights.
  void verify_gemm(const std::string& file, const std::string& tensor, uint64_t e, const RemapParams& p,
                   const ExpertBuffers& b, const std::vector<RemapPart>* original) {
    const Slabs& got = b.got;
    const std::vector<int8_t>& q_cpu = b.q_cpu;
    const uint64_t m = std::max<uint64_t>(1, o_.tokens), k = p.k, n = p.rows;
    Lap lap;
    const std::string part = "expert " + std::to_string(e);
    std::mt19937_64 rng(o_.seed ^ (std::hash<std::string>{}(tensor) + e));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(m * k);
    for (float& v : x) v = bf16_value(static_cast<uint16_t>(f32_bits(dist(rng)) >> 16));
    VerifyCheck& qc = add_check("activation_quant", tensor, part, m * k);
    std::vector<int8_t> a_dev(m * k), a_cpu(m * k);
    std::vector<float> s_dev(m), s_cpu(m);
    std::string error;
    r_.stages.gemm_cpu += lap.next();
    if (!be_.quantize_activations(x, m, k, a_dev, s_dev, error)) return void(backend_failed(qc, file, error));
    lap.next();  // the device's time: TimedBackend
    quantize_activations(x, m, k, a_cpu, s_cpu);
    r_.stages.gemm_cpu += lap.next();
    const bool quant_differs = first_difference<int8_t>(a_dev, a_cpu) || first_difference<float>(s_dev, s_cpu);
    r_.stages.compare += lap.next();
    if (quant_differs) {
      mismatch(qc, file, std::nullopt, part + ": device activation quantization differs from the CPU reference");
      return;
    }
    VerifyCheck& gc = add_check("int8_gemm", tensor, part, m * n);
    std::vector<float> cs(n);
    std::memcpy(cs.data(), got.channel_scale.data(), n * 4);
    std::vector<int32_t> acc_dev(m * n), acc_cpu(m * n);
    std::vector<uint16_t> out_dev(m * n), out_cpu(m * n);
    r_.stages.gemm_cpu += lap.next();
    if (!be_.int8_gemm(a_dev, s_dev, got.mxfp4, got.shift2, cs, m, p, acc_dev, out_dev, error))
      return void(backend_failed(gc, file, error));
    lap.next();  // the device's time: TimedBackend
    // Columns of the product are independent: the CPU reference runs blocks of them on all
    // cores (a block's weight rows stay in cache for every token).
    for_column_blocks(m, n, [&](uint64_t c0, uint64_t cols, std::span<int32_t> acc, std::span<uint16_t> out) {
      int8_gemm_bf16(a_cpu, s_cpu, std::span<const int8_t>(q_cpu).subspan(c0 * k, cols * k),
                     std::span<const float>(cs).subspan(c0, cols), m, cols, k, acc, out);
    }, acc_cpu, out_cpu);
    r_.stages.gemm_cpu += lap.next();
    const auto acc_diff = first_difference<int32_t>(acc_dev, acc_cpu);
    const auto out_diff = acc_diff ? std::nullopt : first_difference<uint16_t>(out_dev, out_cpu);
    r_.stages.compare += lap.next();
    if (auto i = acc_diff) {
      return mismatch(gc, file, std::nullopt,
                      part + " output [" + std::to_string(*i / n) + ", " + std::to_string(*i % n) +
                          "]: device int32 accumulator " + std::to_string(acc_dev[*i]) + " vs CPU " +
                          std::to_string(acc_cpu[*i]));
    }
    if (auto i = out_diff) {
      return mismatch(gc, file, std::nullopt,
                      part + " output [" + std::to_string(*i / n) + ", " + std::to_string(*i % n) + "]: device BF16 " +
                          hex(out_dev[*i], 4) + " vs CPU " + hex(out_cpu[*i], 4));
    }
    if (!original) return;
    // y = x W^T with the original (MXFP4-dequantized) weights, in double, every output summed
    // in gemm_f64's one fixed order (four lanes by i mod 4, then (l0 + l1) + (l2 + l3)), so
    // the value is the same whatever the threads, the ISA or the column blocks. A block's
    // weight rows are decoded for it (the values verify_mxfp4 proved the device's).
    std::vector<double> ys(m * n);
    for_column_blocks(m, n, [&](uint64_t c0, uint64_t cols, std::span<double> y) {
      std::vector<float> w(cols * k);
      original_rows(*original, k, c0, cols, w);
      gemm_f64(x, w, m, cols, k, y);
    }, ys);
    double num = 0, den = 0;
    for (uint64_t rc = 0; rc < m * n; ++rc) {
      const double y = ys[rc], d = bf16_value(out_dev[rc]) - y;
      num += d * d;
      den += y * y;
    }
    const double rel = den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
    r_.stages.gemm_cpu += lap.next();
    gc.rel_l2 = rel;
    r_.max_rel_l2 = std::max(r_.max_rel_l2, rel);
    if (!(rel <= o_.max_rel_l2)) {
      gc.ok = false;
      r_.findings.error("VERIFY_GEMM_ERROR", file, tensor, std::nullopt,
                        part + ": INT8 GEMM relative L2 error " + fmt(rel) + " against the original weights exceeds " +
                            fmt(o_.max_rel_l2));
    }
  }

  // One fused INT8-shift matrix of OUT against the remap of IN's MXFP4 experts.
  // Expert e of one fused INT8-shift matrix of OUT against the remap of IN's MXFP4 experts.
  void verify_fused_expert(const LoadedModel& in, const LoadedModel& out, const FusedMatrix& fm, const ModelTensor& mx,
                           const ModelTensor& sh_t, const ModelTensor& cs_t, uint64_t e) {
    const ModelTensor* sh = &sh_t;
    const ModelTensor* cs = &cs_t;
    const RemapParams& p = fm.params;
    const std::string file = out.view.file_of(mx);
    {
      // The buffers come from the pool, resized: every byte is read or written below before
      // it is compared.
      PooledSteps pooled(r_.steps, true);
      ExpertBuffers& b = *pooled->expert;
      Lap lap;
      // The input experts of this slab, stacked (w13 = w1 rows then w3 rows).
      // Grown, never shrunk: a w2 expert (one part) after a w13 one (two) keeps the second
      // part's buffers for the next w13 expert instead of freeing and faulting them in again.
      if (b.parts.size() < 2 * fm.parts[e].size()) b.parts.resize(2 * fm.parts[e].size());
      for (size_t j = 0; j < fm.parts[e].size(); ++j) {
        b.parts[2 * j].resize(in.view.tensors[fm.parts[e][j].first].nbytes);
        b.parts[2 * j + 1].resize(in.view.tensors[fm.parts[e][j].second].nbytes);
      }
      size_slabs(p, b.got);
      size_slabs(p, b.want);
      r_.stages.buffers += lap.next();
      std::vector<RemapPart> parts;
      for (size_t j = 0; j < fm.parts[e].size(); ++j) {
        const ModelTensor& w = in.view.tensors[fm.parts[e][j].first];
        const ModelTensor& s = in.view.tensors[fm.parts[e][j].second];
        if (!read(file_of(in, w), w.offset, b.parts[2 * j]) || !read(file_of(in, s), s.offset, b.parts[2 * j + 1])) return;
        parts.push_back(RemapPart{b.parts[2 * j], b.parts[2 * j + 1], w.shape[0]});
      }
      const Slabs& got = b.got;
      Slabs& want = b.want;
      if (!read_slabs(out, mx, *sh, *cs, e, b.got)) return;
      lap.next();  // the reads' time: Verifier::read
      VerifyCheck& bc = add_check("int8_shift_bytes", mx.name, "expert " + std::to_string(e), p.rows * p.k);
      const bool remap_failed = remap_expert_mxfp4(parts, p, want.mxfp4, nullptr) ||
                                remap_expert_shift2(parts, p, want.shift2) ||
                                remap_expert_channel_scale(parts, p, want.channel_scale);
      r_.stages.cpu_reference += lap.next();
      if (remap_failed) {
        bc.ok = false;
        r_.findings.error("VERIFY_INPUT", in.path, mx.name, std::nullopt,
                          "the reference experts cannot be remapped (expert " + std::to_string(e) + ")");
        return;
      }
      const bool slabs_equal = compare_slabs(bc, out, mx, *sh, *cs, p, e, got, want);
      r_.stages.compare += lap.next();
      if (!slabs_equal) return;
      const bool gemm = o_.gemm_experts == 0 || e < o_.gemm_experts;
      if (!verify_decode(file, mx.name, e, p, b, gemm) || !gemm) return;
      if (!verify_mxfp4(file, mx.name, e, p, parts, b)) return;
      verify_gemm(file, mx.name, e, p, b, &parts);
    }
  }

  bool compare_slabs(VerifyCheck& c, const LoadedModel& out, const ModelTensor& mx, const ModelTensor& sh,
                     const ModelTensor& cs, const RemapParams& p, uint64_t e, const Slabs& got, const Slabs& want) {
    const std::string expert = "expert " + std::to_string(e);
    if (auto i = first_difference<uint8_t>(got.mxfp4, want.mxfp4)) {
      const bool high = ((got.mxfp4[*i] ^ want.mxfp4[*i]) & 0x0F) == 0;
      const auto [row, col] = tile_element(p, *i, high);
      const unsigned gc = high ? got.mxfp4[*i] >> 4 : got.mxfp4[*i] & 15, wc = high ? want.mxfp4[*i] >> 4 : want.mxfp4[*i] & 15;
      const unsigned shift = (want.shift2[(((col / 32) / 4) * ((p.rows + 7) / 8) + row / 8) * 8 + row % 8] >> (2 * ((col / 32) % 4))) & 3;
      mismatch(c, out.view.file_of(mx), mx.offset + e * got.mxfp4.size() + *i,
               expert + " element [" + std::to_string(row) + ", " + std::to_string(col) + "]: code " + hex(gc, 1) +
                   " (decodes to " + std::to_string(kE2m1LutX2[gc] * (1 << shift)) + ") vs remap of the reference " +
                   hex(wc, 1) + " (" + std::to_string(kE2m1LutX2[wc] * (1 << shift)) + ")");
      return false;
    }
    if (auto i = first_difference<uint8_t>(got.shift2, want.shift2)) {
      c.tensor = sh.name;
      mismatch(c, out.view.file_of(sh), sh.offset + e * got.shift2.size() + *i,
               expert + " shift2 byte " + std::to_string(*i) + ": " + hex(got.shift2[*i], 2) + " vs remap of the reference " +
                   hex(want.shift2[*i], 2));
      return false;
    }
    if (auto i = first_difference<uint8_t>(got.channel_scale, want.channel_scale)) {
      c.tensor = cs.name;
      const uint64_t row = *i / 4;
      float g, w;
      std::memcpy(&g, got.channel_scale.data() + 4 * row, 4);
      std::memcpy(&w, want.channel_scale.data() + 4 * row, 4);
      mismatch(c, out.view.file_of(cs), cs.offset + e * got.channel_scale.size() + 4 * row,
               expert + " channel_scale[" + std::to_string(row) + "]: " + fmt(g) + " vs remap of the reference " + fmt(w));
      return false;
    }
    return true;
  }

  // The original weights on the device and on the CPU: lut_x2[c] * 2^(b - 128), exactly;
  // each part in steps of at most 1M elements (b.w_step), so the GEMM check's memory does not
  // hold the expert's f32 matrix (its double product decodes its rows itself, original_rows,
  // the values proven equal here).
  bool verify_mxfp4(const std::string& file, const std::string& tensor, uint64_t e, const RemapParams& p,
                    const std::vector<RemapPart>& parts, ExpertBuffers& b) {
    VerifyCheck& c = add_check("mxfp4_dequant", tensor, "expert " + std::to_string(e), p.rows * p.k);
    // The remap has accepted these parts; the steps and original_rows index them, so their
    // sizes are checked here again rather than trusted.
    uint64_t rows = 0;
    for (const RemapPart& part : parts) {
      if (part.weight.size() != part.rows * p.k / 2 || part.scale.size() != part.rows * p.k / 32) rows = UINT64_MAX;
      if (rows != UINT64_MAX) rows += part.rows;
    }
    if (p.k % 32 || rows != p.rows) {
      c.ok = false;
      r_.findings.error("VERIFY_LAYOUT", file, tensor, std::nullopt,
                        "expert " + std::to_string(e) + ": its MXFP4 parts do not make a [" + std::to_string(p.rows) +
                            ", " + std::to_string(p.k) + "] matrix");
      return false;
    }
    const uint64_t step_rows = original_step_rows(p.k);
    Lap lap;
    b.w_step.resize(std::min(step_rows, p.rows) * p.k);
    r_.stages.buffers += lap.next();
    uint64_t row0 = 0;
    for (const RemapPart& part : parts) {
      for (uint64_t r = 0; r < part.rows; r += step_rows) {
        const uint64_t n = std::min(step_rows, part.rows - r);
        if (!verify_mxfp4_step(c, file, e, p.k, part, r, n, row0, b.w_step)) return false;
      }
      row0 += part.rows;
    }
    return true;
  }
  // Rows [r, r + n) of one part (rows row0 + r .. of the fused matrix).
  bool verify_mxfp4_step(VerifyCheck& c, const std::string& file, uint64_t e, uint64_t k, const RemapPart& part,
                         uint64_t r, uint64_t n, uint64_t row0, std::vector<float>& step) {
    Lap lap;
    const std::span<const uint8_t> weight = part.weight.subspan(r * k / 2, n * k / 2), scale = part.scale.subspan(r * k / 32, n * k / 32);
    // Pooled, so NaN first: no CPU value is NaN (finite or infinite), so an element the
    // device does not write differs.
    const std::span<float> dst(step.data(), n * k);
    std::fill(dst.begin(), dst.end(), std::numeric_limits<float>::quiet_NaN());
    r_.stages.buffers += lap.next();
    std::string error;
    if (!be_.mxfp4_to_f32(weight, scale, n, k, dst, error)) return backend_failed(c, file, error);
    r_.input_bytes_decoded += weight.size() + scale.size();
    lap.next();  // the device's time: TimedBackend
    const Mxfp4ValueTable& values = mxfp4_value_table();
    auto want_of = [&](uint64_t i) {
      const uint8_t byte = weight[i / 2], code = (i % 2) ? byte >> 4 : byte & 15;
      return values.v[scale[i / 32]][code];
    };
    // By 32-blocks (one scale each): the block's 32 CPU values from its table row, compared
    // with the device's bytes at once; the first differing element of the first differing
    // block is the one named.
    const auto bad_block = first_index(dst.size() / 32, [&](uint64_t blk) {
      float want[32];
      block_values(values, weight.data() + 16 * blk, scale[blk], want);
      return std::memcmp(want, dst.data() + 32 * blk, sizeof want) != 0;
    });
    std::optional<uint64_t> bad;
    for (uint64_t i = bad_block ? 32 * *bad_block : 0; bad_block && i < 32 * *bad_block + 32 && !bad; ++i)
      if (f32_bits(want_of(i)) != f32_bits(dst[i])) bad = i;
    r_.stages.compare += lap.next();  // the CPU values (a table lookup each) and the comparison
    if (!bad) return true;
    const uint64_t i = *bad;
    mismatch(c, file, std::nullopt,
             "expert " + std::to_string(e) + " original weight [" + std::to_string(row0 + r + i / k) + ", " +
                 std::to_string(i % k) + "]: device " + fmt(dst[i]) + " vs CPU " + fmt(want_of(i)));
    return false;
  }
  // One 32-block's original weights: its 16 code bytes (low nibble first) under its scale.
  static void block_values(const Mxfp4ValueTable& values, const uint8_t* codes, uint8_t scale, float* out) {
    const float* row = values.v[scale];
    for (int j = 0; j < 16; ++j) {
      out[2 * j] = row[codes[j] & 15];
      out[2 * j + 1] = row[codes[j] >> 4];
    }
  }
  // Rows [c0, c0 + cols) of the fused matrix's original weights (parts stacked) into w.
  static void original_rows(const std::vector<RemapPart>& parts, uint64_t k, uint64_t c0, uint64_t cols,
                            std::span<float> w) {
    const Mxfp4ValueTable& values = mxfp4_value_table();
    uint64_t row0 = 0;
    for (const RemapPart& part : parts) {
      for (uint64_t c = std::max(c0, row0); c < std::min(c0 + cols, row0 + part.rows); ++c) {
        const uint64_t r = c - row0;
        for (uint64_t blk = 0; blk < k / 32; ++blk)
          block_values(values, part.weight.data() + r * k / 2 + 16 * blk, part.scale[r * k / 32 + blk],
                       w.data() + (c - c0) * k + 32 * blk);
      }
      row0 += part.rows;
    }
  }

  const LoadedModel* in_ = nullptr;
};

// ---- GGUF: every tensor, and expert packs: every blob part ---------------------------

// CPU digests computed ahead while an OpeningBackend still starts its device (a CUDA
// process's first ~0.3 s): a digest step's CPU side needs no device, so the cores compute
// what they can of it then, in plan order, and a job takes what is done instead of
// computing it again (the same bytes, the same steps, the same function: the digests are
// equal). A step not done ahead is computed by its job as before, so what is verified and
// reported does not depend on how far the phase got. One slot per planned digest step.
class DigestsAhead {
 public:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  // Registers the digest steps of a range as verify_range will take them; its first slot,
  // or kNone for a range compared element by element (or not at all).
  size_t add(const DecodeBackend& be, const VerifyOptions& o, int32_t type, uint64_t row_elems, uint64_t bytes,
             const MappedFile& cpu_file, uint64_t cpu_offset);
  // On all cores but one (the driver's start needs one), while `be` is opening and within
  // `budget` less the backend's own memory. Returns the phase's wall seconds.
  double compute(const DecodeBackend& be, const DigestWeights& w, uint64_t budget, VerifyStages& stages);
  // The digest of step `step` of the range registered at `first`, when it was computed.
  bool take(size_t first, uint64_t step, F32Digest& out) const {
    if (first == kNone || !slots_) return false;
    const Slot& s = slots_[first + step];
    if (!s.done.load(std::memory_order_acquire)) return false;
    out = s.value;
    return true;
  }

 private:
  struct Step {
    int32_t type;
    const MappedFile* file;
    uint64_t offset, bytes;
  };
  struct Slot {
    std::atomic<bool> done{false};
    F32Digest value;
  };
  std::vector<Step> steps_;
  std::unique_ptr<Slot[]> slots_;
};

class GgufVerifier : public Verifier {
 public:
  GgufVerifier(DecodeBackend& backend, const VerifyOptions& o, Sink& r) : Verifier(backend, o, r) {}

  // Whether a job's steps compare digests: the backend has them, --full-compare is off and
  // one row fits a digest.
  static bool digest_steps(const DecodeBackend& be, const VerifyOptions& o, uint64_t row_elems) {
    return be.has_ggml_digest() && !o.full_compare && row_elems <= kDigestMaxElems;
  }
  // The bytes of each step of a range of whole rows (the last may be shorter): at most the
  // backend's chunk, and kDigestMaxElems elements where digests are compared (a step then
  // holds only its input; a quarter as many backend calls, each with its fixed launches and
  // wait, as with kStepElems) or kStepElems where every element is (its f32 on both sides).
  static uint64_t step_bytes(uint64_t row_bytes, uint64_t row_elems, uint64_t bytes, uint64_t chunk, bool digest) {
    return std::min(rows_per_step(row_bytes, row_elems, chunk, digest) * row_bytes, bytes);
  }
  static uint64_t rows_per_step(uint64_t row_bytes, uint64_t row_elems, uint64_t chunk, bool digest) {
    const uint64_t elems = digest ? kDigestMaxElems : kStepElems;
    return std::max<uint64_t>(1, std::min(chunk / std::max<uint64_t>(1, row_bytes), elems / std::max<uint64_t>(1, row_elems)));
  }
  // Two input steps, and two f32 steps (device and CPU) when every element is compared, or
  // two f32 pieces when digests are (a differing step is then compared piece by piece).
  static uint64_t job_memory(const DecodeBackend& be, const VerifyOptions& o, int32_t type, uint64_t row_elems,
                             uint64_t bytes) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (!info || info->block_size == 0 || info->type_size == 0 || row_elems % info->block_size || bytes == 0) return 0;
    const uint64_t row_bytes = row_elems / info->block_size * info->type_size;
    if (row_bytes == 0) return 0;
    const bool digest = digest_steps(be, o, row_elems);
    const uint64_t rows = std::min(rows_per_step(row_bytes, row_elems, std::max<uint64_t>(1, be.max_chunk_bytes()), digest),
                                   std::max<uint64_t>(1, bytes / row_bytes));
    const uint64_t f32 = digest ? 2 * 4 * kDigestPiece : 8 * rows * row_elems;
    return 2 * rows * row_bytes + f32;
  }

  // Dequantizes `bytes` of type `type` (whole rows of `row_elems`) read from `src` at
  // `src_offset` on the device; the CPU dequantizes `ref` at `ref_offset` (the same bytes,
  // or the slice they were copied from).
  // `ahead`: the range's first slot in DigestsAhead (its CPU digests possibly done).
  void verify_range(const std::string& tensor, const std::string& part, int32_t type, uint64_t row_elems,
                    uint64_t bytes, const MappedFile& src, uint64_t src_offset, const MappedFile& ref,
                    uint64_t ref_offset, const DigestsAhead* ahead = nullptr, size_t ahead_first = DigestsAhead::kNone) {
    const GgmlTypeInfo* info = ggml_type_info(type);
    VerifyCheck& c = add_check("ggml_dequant", tensor, part, 0);
    if (!info || info->block_size == 0 || info->type_size == 0 || row_elems % info->block_size) {
      c.ok = false;
      r_.findings.error("VERIFY_UNSUPPORTED", src.path(), tensor, src_offset,
                        "unsupported ggml type id " + std::to_string(type));
      return;
    }
    // A zero-element tensor (some ne is 0; every reader accepts it) decodes to nothing on
    // both sides: a check that passes trivially, with 0 elements.
    if (bytes == 0) return;
    const uint64_t row_bytes = row_elems / info->block_size * info->type_size;
    if (row_bytes == 0 || bytes % row_bytes) {
      c.ok = false;
      r_.findings.error("VERIFY_LAYOUT", src.path(), tensor, src_offset, "byte length is not whole rows");
      return;
    }
    c.elements = bytes / row_bytes * row_elems;
    // Digests first where the backend has them: 16 bytes back per step instead of every
    // f32 (8x a 4-bit input), the CPU's reference digested in cache-sized pieces.
    const bool digest = digest_steps(be_, o_, row_elems);
    const uint64_t step = step_bytes(row_bytes, row_elems, bytes, chunk_bytes(), digest);
    // A GGUF checked alone decodes the same bytes on both sides: one read per step.
    const bool same_bytes = &src == &ref && src_offset == ref_offset;
    PooledSteps bufs(r_.steps);
    const std::span<uint8_t> dev_in = StepBuffers::take(bufs->a, step);
    const std::span<uint8_t> cpu_in = same_bytes ? dev_in : StepBuffers::take(bufs->b, step);
    for (uint64_t done = 0; done < bytes; done += step) {
      const uint64_t n = std::min(step, bytes - done), elems = n / row_bytes * row_elems;
      const Step st{tensor, part, *info, src.path(), src_offset, done / row_bytes * row_elems, done, same_bytes};
      std::span<uint8_t> a(dev_in.data(), n), b(cpu_in.data(), n);
      if (!read(src, src_offset + done, a) || (!same_bytes && !read(ref, ref_offset + done, b))) return void(c.ok = false);
      std::string error;
      r_.input_bytes_decoded += n;
      if (!digest) {  // every element compared
        if (!compare(c, st, type, a, b, StepBuffers::take(bufs->got, elems), StepBuffers::take(bufs->want, elems)))
          return;
        continue;
      }
      F32Digest device, cpu;
      if (!be_.ggml_digest(type, a, *r_.digest, device, error)) return void(backend_failed(c, src.path(), error));
      Lap lap;
      if (!(ahead && ahead->take(ahead_first, done / step, cpu)) &&
          !cpu_digest(type, b, *r_.digest, cpu, error))
        return cpu_failed(c, src.path(), tensor, src_offset, error);
      r_.stages.cpu_reference += lap.next();
      if (device == cpu) continue;
      // The digests differ: compared piece by piece (within the job's memory) to name the
      // first differing element and both values.
      const uint64_t piece_bytes = kDigestPiece / info->block_size * info->type_size;
      for (uint64_t off = 0; off < n; off += piece_bytes) {
        const uint64_t nb = std::min(piece_bytes, n - off);
        const Step sp{tensor, part, *info, src.path(), src_offset, st.first_element + off / info->type_size * info->block_size,
                      done + off, same_bytes};
        const uint64_t pe = nb / info->type_size * info->block_size;
        if (!compare(c, sp, type, a.subspan(off, nb), b.subspan(off, nb), StepBuffers::take(bufs->got, pe),
                     StepBuffers::take(bufs->want, pe)))
          return;
      }
      digest_kernel_wrong(c, src.path(), step_at(src_offset + done), "f32 results equal the CPU's");
      return;
    }
  }

  // Where a compared range lies: its first element and byte within the tensor or part.
  struct Step {
    const std::string &tensor, &part;
    const GgmlTypeInfo& info;
    const std::string& path;
    uint64_t src_offset, first_element, first_byte;
    bool same_bytes;
  };
  // The device's and the CPU's f32 of whole blocks a (device input) and b (CPU input),
  // element by element; false when they differ (the first difference reported) or a side
  // failed.
  bool compare(VerifyCheck& c, const Step& st, int32_t type, std::span<const uint8_t> a, std::span<const uint8_t> b,
               std::span<float> got, std::span<float> want) {
    std::string error;
    if (!be_.ggml_to_f32(type, a, got, error)) return backend_failed(c, st.path, error);
    if (!ggml_dequantize(type, b, want, error)) return cpu_failed(c, st.path, st.tensor, st.src_offset, error), false;
    const auto i = first_difference<float>(got, want);
    if (!i) return true;
    const uint64_t block_offset = st.first_byte + (*i / st.info.block_size) * st.info.type_size;
    mismatch(c, st.path, st.src_offset + block_offset,
             (st.part.empty() ? "" : st.part + " ") + "element " + std::to_string(st.first_element + *i) + " (" +
                 st.info.name + " block at byte " + std::to_string(block_offset) + "): device " + fmt(got[*i]) + " [" +
                 hex(f32_bits(got[*i]), 8) + "] vs CPU dequant of the " + (st.same_bytes ? "same bytes " : "source ") +
                 fmt(want[*i]) + " [" + hex(f32_bits(want[*i]), 8) + "]");
    return false;
  }

  // Elements per piece of the CPU's digest: 256 KiB of f32, dequantized and digested while
  // in cache (a multiple of every ggml block size).
  static constexpr uint64_t kDigestPiece = 65536;

  // The digest of the CPU dequantization of `blocks` (whole blocks), fused: the AVX2 block
  // loops feed the digest's sums directly and store no f32 (numerics/ggml_dequant.h).
  static bool cpu_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                         std::string& error) {
    return ggml_dequant_digest(type, blocks, 0, w, out, error);
  }
  void cpu_failed(VerifyCheck& c, const std::string& file, const std::string& tensor, uint64_t offset,
                  const std::string& error) {
    c.ok = false;
    r_.findings.error("VERIFY_UNSUPPORTED", file, tensor, offset, "CPU reference: " + error);
  }

  // Every tensor of `model` on the device against the CPU's dequantization of the same
  // bytes, or, where `source` (a pack's reference) has a tensor of the same name, type and
  // size, of the source's bytes: a dense tensor of a pack changed after the repack is then a
  // mismatch, not a pass (the renamed A_log, whose values differ by design, has no namesake).
  static void plan_gguf(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model, DigestsAhead& ahead,
                        std::vector<Job>& jobs, const LoadedModel* source = nullptr) {
    for (const auto& t : model.view.tensors) {
      if (!t.payload_ok || t.shape.empty()) {
        jobs.push_back({0, [](Sink&) {}});  // counted in the progress, as before
        continue;
      }
      const ModelTensor* namesake = source ? source->view.find(t.name) : nullptr;
      const bool from_source = namesake && namesake->payload_ok && namesake->ggml_type == t.ggml_type &&
                               namesake->shape == t.shape && namesake->nbytes == t.nbytes;
      const MappedFile& cpu_file = from_source ? source->gguf_file : model.gguf_file;
      const uint64_t cpu_off = from_source ? namesake->offset : t.offset;
      const size_t first = ahead.add(be, o, t.ggml_type, t.shape[0], t.nbytes, cpu_file, cpu_off);
      jobs.push_back({job_memory(be, o, t.ggml_type, t.shape[0], t.nbytes),
                      [&be, &o, &model, &t, &cpu_file, cpu_off, &ahead, first](Sink& s) {
                        GgufVerifier(be, o, s).verify_range(t.name, "", t.ggml_type, t.shape[0], t.nbytes,
                                                            model.gguf_file, t.offset, cpu_file, cpu_off, &ahead, first);
                      }});
    }
  }
};

size_t DigestsAhead::add(const DecodeBackend& be, const VerifyOptions& o, int32_t type, uint64_t row_elems,
                         uint64_t bytes, const MappedFile& cpu_file, uint64_t cpu_offset) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (!info || info->block_size == 0 || info->type_size == 0 || row_elems % info->block_size || bytes == 0) return kNone;
  const uint64_t row_bytes = row_elems / info->block_size * info->type_size;
  if (row_bytes == 0 || bytes % row_bytes) return kNone;  // verify_range reports it
  if (!GgufVerifier::digest_steps(be, o, row_elems)) return kNone;
  const uint64_t step = GgufVerifier::step_bytes(row_bytes, row_elems, bytes, std::max<uint64_t>(1, be.max_chunk_bytes()), true);
  const size_t first = steps_.size();
  for (uint64_t done = 0; done < bytes; done += step)
    steps_.push_back({type, &cpu_file, cpu_offset + done, std::min(step, bytes - done)});
  return first;
}

double DigestsAhead::compute(const DecodeBackend& be, const DigestWeights& w, uint64_t budget, VerifyStages& stages) {
  if (steps_.empty() || be.state() != BackendState::opening) return 0;
  Lap wall;
  slots_ = std::make_unique<Slot[]>(steps_.size());
  uint64_t largest = 1;
  for (const Step& st : steps_) largest = std::max(largest, st.bytes);
  const uint64_t per_thread = largest;  // a step's input (the fused digest stores no f32)
  const uint64_t for_ahead = budget > be.host_memory() ? budget - be.host_memory() : 0;
  const int cores = std::max(1, tbb::this_task_arena::max_concurrency());
  const int threads = static_cast<int>(std::clamp<uint64_t>(for_ahead / per_thread, 1, std::max(1, cores - 1)));
  struct Buffers {
    std::vector<uint8_t> in;
    double seconds = 0;
  };
  tbb::enumerable_thread_specific<Buffers> buffers;
  std::atomic<bool> stop{false};
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, steps_.size(), 1),
        [&](const tbb::blocked_range<size_t>& r) {
          Buffers& b = buffers.local();
          for (size_t i = r.begin(); i < r.end(); ++i) {
            if (stop.load(std::memory_order_relaxed)) return;
            if (be.state() != BackendState::opening) return stop.store(true);
            const Step& st = steps_[i];
            Lap lap;
            IoError err;
            std::string error;
            F32Digest d;
            if (st.file->read_at(st.offset, StepBuffers::take(b.in, st.bytes), err) &&
                GgufVerifier::cpu_digest(st.type, std::span<const uint8_t>(b.in.data(), st.bytes), w, d, error)) {
              slots_[i].value = d;
              slots_[i].done.store(true, std::memory_order_release);
            }  // else its job reads and computes it again, and reports what fails
            b.seconds += lap.next();
          }
        },
        tbb::simple_partitioner());
  });
  for (const Buffers& b : buffers) stages.cpu_reference += b.seconds;
  return wall.next();
}

// An expert pack: every blob part against its source slice, then the dense remainder. The
// files opened here outlive the jobs that read them.
struct PackPlan {
  MappedFile experts, ref;
  LoadedModel dense, source;  // source: the reference's tensors, when it reads cleanly
  bool have_dense = false, have_source = false;

  DigestsAhead ahead;

  bool plan(DecodeBackend& be, const VerifyOptions& o, const std::string& dir, const PackManifest& m,
            const std::string& reference, std::vector<Job>& jobs, Findings& findings) {
    IoError err;
    if (!experts.open((fs::path(dir) / m.experts_name).string(), err) || (!reference.empty() && !ref.open(reference, err))) {
      findings.error("IO_OPEN", err.path, "", std::nullopt, err.message);
      return false;
    }
    Findings df;
    have_dense = load_model((fs::path(dir) / m.dense_name).string(), StReadOptions{}, dense, df) && !df.has_errors() &&
                 dense.format == ModelFormat::gguf;
    for (const auto& b : m.blobs) {
      for (const auto& p : b.parts) {
        // validate_expert_pack has range-checked every part against experts.bin and the source.
        const MappedFile& cpu_src = reference.empty() ? experts : ref;
        const uint64_t cpu_off = reference.empty() ? b.offset + p.offset : p.source_offset;
        const size_t first = ahead.add(be, o, static_cast<int32_t>(p.type_id), p.ne0, p.size, cpu_src, cpu_off);
        jobs.push_back({GgufVerifier::job_memory(be, o, static_cast<int32_t>(p.type_id), p.ne0, p.size),
                        [&be, &o, this, &b, &p, &cpu_src, cpu_off, first](Sink& s) {
                          GgufVerifier(be, o, s).verify_range(p.tensor, pack_blob_name(b), static_cast<int32_t>(p.type_id),
                                                              p.ne0, p.size, experts, b.offset + p.offset, cpu_src, cpu_off,
                                                              &ahead, first);
                        }});
      }
    }
    if (!reference.empty()) {
      Findings sf;
      have_source = load_model(reference, StReadOptions{}, source, sf) && !sf.has_errors() &&
                    source.format == ModelFormat::gguf;
    }
    // The dense remainder, device against the CPU of the reference's bytes (else its own).
    if (have_dense) GgufVerifier::plan_gguf(be, o, dense, ahead, jobs, have_source ? &source : nullptr);
    return true;
  }
};

// How many jobs may run at once: the budget less what the backend holds itself (its pinned
// staging, DecodeBackend::host_memory), divided by the largest job's memory (every buffer
// a job holds, step buffers from the pool included); at least one, at most twice the
// cores. A job larger than the budget alone (one expert's matrices of a huge model) runs
// alone.
uint64_t jobs_in_flight(const std::vector<Job>& jobs, uint64_t budget, uint64_t backend_memory) {
  uint64_t largest = 1;
  for (const Job& j : jobs) largest = std::max(largest, j.memory);
  const uint64_t cores = static_cast<uint64_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  const uint64_t for_jobs = budget > backend_memory ? budget - backend_memory : 0;
  return std::clamp<uint64_t>(for_jobs / largest, 1, 2 * cores);
}

// The kinds of backend call, as --stats counts them (VerifyStages::device_*, gemm_device).
enum class CallKind { fp8, mxfp4, int8_decode, ggml, gemm };

// Every call of `inner` run through around(kind, call): the one-call-at-a-time and the
// timing wrappers below differ only in `Around`.
template <class Around>
class AroundBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  Around around;
  bool fp8_to_bf16(std::span<const uint8_t> w, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                   std::span<const uint8_t> scale, std::span<uint16_t> out, std::string& error) override {
    return around(CallKind::fp8, [&] { return inner().fp8_to_bf16(w, row_begin, g, kind, scale, out, error); });
  }
  bool mxfp4_to_f32(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    return around(CallKind::mxfp4, [&] { return inner().mxfp4_to_f32(w, scale, rows, k, out, error); });
  }
  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    return around(CallKind::int8_decode, [&] { return inner().decode_int8_shift(tiles, shift2, p, q, error); });
  }
  bool quantize_activations(std::span<const float> x, uint64_t m, uint64_t k, std::span<int8_t> a,
                            std::span<float> a_scale, std::string& error) override {
    return around(CallKind::gemm, [&] { return inner().quantize_activations(x, m, k, a, a_scale, error); });
  }
  bool int8_gemm(std::span<const int8_t> a, std::span<const float> a_scale, std::span<const uint8_t> tiles,
                 std::span<const uint8_t> shift2, std::span<const float> cs, uint64_t m, const RemapParams& p,
                 std::span<int32_t> acc, std::span<uint16_t> out, std::string& error) override {
    return around(CallKind::gemm,
                  [&] { return inner().int8_gemm(a, a_scale, tiles, shift2, cs, m, p, acc, out, error); });
  }
  bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out, std::string& error) override {
    return around(CallKind::ggml, [&] { return inner().ggml_to_f32(type, blocks, out, error); });
  }
  bool ggml_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                   std::string& error) override {
    return around(CallKind::ggml, [&] { return inner().ggml_digest(type, blocks, w, out, error); });
  }
  bool fp8_bf16_digest(std::span<const uint8_t> wr, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                       std::span<const uint8_t> scale, const DigestWeights& w, F32Digest& out, std::string& error) override {
    return around(CallKind::fp8, [&] { return inner().fp8_bf16_digest(wr, row_begin, g, kind, scale, w, out, error); });
  }
  bool mxfp4_bf16_digest(std::span<const uint8_t> wt, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    return around(CallKind::mxfp4, [&] { return inner().mxfp4_bf16_digest(wt, scale, rows, k, w, out, error); });
  }
  bool int8_shift_digest(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    return around(CallKind::int8_decode, [&] { return inner().int8_shift_digest(tiles, shift2, p, w, out, error); });
  }
};

// For a backend whose calls may not overlap (one device, shared device buffers): one call
// at a time, while the other jobs' reads, CPU references and comparisons go on.
struct OneAtATime {
  std::mutex mu;
  template <class Call>
  bool operator()(CallKind, Call call) {
    std::lock_guard<std::mutex> lock(mu);
    return call();
  }
};
using SerialBackend = AroundBackend<OneAtATime>;

// Times every backend call by kind (--stats; VerifyStages::device_*): the calling thread's
// wall time, summed in nanoseconds over all threads.
struct CallTimes {
  std::atomic<uint64_t> ns[5] = {};
  template <class Call>
  bool operator()(CallKind kind, Call call) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = call();
    ns[static_cast<int>(kind)] += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    return ok;
  }
  void add_to(VerifyStages& s) const {
    auto sec = [&](CallKind k) { return static_cast<double>(ns[static_cast<int>(k)].load()) * 1e-9; };
    s.device_fp8 += sec(CallKind::fp8);
    s.device_mxfp4 += sec(CallKind::mxfp4);
    s.device_int8_decode += sec(CallKind::int8_decode);
    s.device_ggml += sec(CallKind::ggml);
    s.device += sec(CallKind::fp8) + sec(CallKind::mxfp4) + sec(CallKind::int8_decode) + sec(CallKind::ggml);
    s.gemm_device += sec(CallKind::gemm);
  }
};
using TimedBackend = AroundBackend<CallTimes>;

// Runs the jobs: a oneTBB pipeline of at most jobs_in_flight() tokens, each job on any
// core, the results merged into the report in job order.
// `ahead` (GGUF and packs): CPU digests computed first while the device still opens. Jobs
// do not start on a backend that failed to open (the caller reports NO_DEVICE).
void run_jobs(std::vector<Job>& jobs, const DecodeBackend& be, const VerifyOptions& o, VerifyReport& r,
              DigestsAhead* ahead = nullptr) {
  const uint64_t tokens = jobs_in_flight(jobs, o.memory_budget, be.host_memory());
  StepPool steps;
  // One fresh key per run (numerics/f32_digest.h: no input or kernel bug can be made to match it).
  const DigestWeights digest(digest_fresh_key());
  if (ahead) r.stages.ahead += ahead->compute(be, digest, o.memory_budget, r.stages);
  if (be.state() == BackendState::failed) return;
  r.backend = be.name();  // waits for an opening backend
  r.jobs = jobs.size();
  r.jobs_in_flight = tokens;
  size_t next = 0, done = 0;
  struct Item {
    size_t index = 0;
    std::unique_ptr<Sink> sink;
  };
  tbb::parallel_pipeline(
      static_cast<size_t>(tokens),
      tbb::make_filter<void, Item>(tbb::filter_mode::serial_in_order,
                                   [&](tbb::flow_control& fc) {
                                     if (next == jobs.size()) {
                                       fc.stop();
                                       return Item{};
                                     }
                                     return Item{next++, nullptr};
                                   }) &
          tbb::make_filter<Item, Item>(tbb::filter_mode::parallel,
                                       [&](Item it) {
                                         it.sink = std::make_unique<Sink>();
                                         it.sink->backend = r.backend;
                                         it.sink->steps = &steps;
                                         it.sink->digest = &digest;
                                         Lap lap;
                                         jobs[it.index].run(*it.sink);
                                         it.sink->stages.jobs += lap.next();
                                         jobs[it.index].run = nullptr;  // captured state goes now
                                         return it;
                                       }) &
          tbb::make_filter<Item, void>(tbb::filter_mode::serial_in_order, [&](Item it) {
            Sink& s = *it.sink;
            for (auto& c : s.checks) r.checks.push_back(std::move(c));
            r.findings.append(s.findings);
            r.input_bytes_decoded += s.input_bytes_decoded;
            r.max_rel_l2 = std::max(r.max_rel_l2, s.max_rel_l2);
            r.stages += s.stages;
            ++done;
            if (o.progress) o.progress(done, jobs.size());
          }));
}

void add_errors(const Findings& from, Findings& to) {
  for (const auto& f : from.items()) to.add(f);
}

// A checkpoint alone whose quantized weights cannot be planned (FP8 without a usable scale
// or with a wrong grid, MXFP4 blocks of a wrong layout): they are not verified, and a PASS
// on the rest would hide that. `what`: "3 FP8 tensors are", ...
void report_unplanned(const Findings& plan_findings, const std::string& what, const std::string& path, VerifyReport& r) {
  add_errors(plan_findings, r.findings);
  r.findings.error("VERIFY_INPUT", path, "", std::nullopt,
                   what + " not verified: the checkpoint cannot be planned (see the other findings)");
}
// No plan at all: its FP8 tensors (counted) or, without any, its quantized weights.
void report_unplanned_checkpoint(const LoadedModel& model, const Findings& plan_findings, VerifyReport& r) {
  const auto fp8 = std::count_if(model.view.tensors.begin(), model.view.tensors.end(), [](const ModelTensor& t) {
    return t.dtype == Dtype::F8_E4M3 || t.dtype == Dtype::F8_E5M2;
  });
  report_unplanned(plan_findings,
                   fp8 == 0 ? "its quantized weights are" : std::to_string(fp8) + (fp8 == 1 ? " FP8 tensor is" : " FP8 tensors are"),
                   model.path, r);
}

// Zero checks is no evidence: verify never says PASS about nothing.
void report_nothing_verified(VerifyReport& r) {
  if (!r.checks.empty() || r.findings.has_errors()) return;
  std::string why;
  if (r.kind == "checkpoint")
    why = "it holds no FP8 weight with a scale, no MXFP4 expert weight and no INT8-shift expert, the only tensors "
          "verified without a reference; to verify a conversion's output, give its input with --reference IN";
  else if (r.kind == "converted")
    why = "the conversion plan of the reference has no tensor that is present in it";
  else
    why = "it holds no tensor";
  r.findings.error("VERIFY_NOTHING", r.path, "", std::nullopt, "nothing was verified (0 checks): " + why);
}

void verify_safetensors(const std::string& path, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r) {
  LoadedModel out;
  Findings lf;
  if (!load_model(path, StReadOptions{}, out, lf) || lf.has_errors()) {
    add_errors(lf, r.findings);
    r.findings.error("VERIFY_INPUT", path, "", std::nullopt, "the checkpoint does not read cleanly (run ckpt validate)");
    return;
  }
  if (out.format == ModelFormat::gguf) {
    r.kind = "gguf";
    std::vector<Job> jobs;
    DigestsAhead ahead;
    GgufVerifier::plan_gguf(be, o, out, ahead, jobs);
    run_jobs(jobs, be, o, r, &ahead);
    return;
  }
  std::vector<Job> jobs;
  if (o.reference.empty()) {
    r.kind = "checkpoint";
    // --experts bf16's plan: it pairs the FP8 weights as keep's does and also names every
    // MXFP4 expert weight (DeepSeek routed experts, gpt-oss _blocks), which a checkpoint alone
    // verifies too; keep's where bf16's cannot be made.
    ConversionPlan plan;
    Findings bf16_findings;
    bool planned = plan_conversion(out, ExpertMode::bf16, RemapOptions{}, plan, bf16_findings);
    if (!planned) {
      plan = ConversionPlan{};
      Findings pf;
      planned = plan_conversion(out, ExpertMode::keep, RemapOptions{}, plan, pf);
      if (!planned) report_unplanned_checkpoint(out, pf, r);
      else report_unplanned(bf16_findings, "its MXFP4 expert weights are", out.path, r);  // only bf16's plan needs them
    }
    CheckpointVerifier::plan_self(be, o, out, planned ? &plan : nullptr, jobs);
    run_jobs(jobs, be, o, r);
    return;
  }
  r.kind = "converted";
  // The structural comparison first: tensor set, dtypes, shapes, config, totals.
  check_against_reference(out, o.reference, false, r.findings);
  LoadedModel in;
  Findings inf;
  if (!load_model(o.reference, StReadOptions{}, in, inf) || inf.has_errors()) return;  // reported above
  RemapOptions remap;
  const ExpertMode mode = detect_conversion_mode(out, remap);
  ConversionPlan plan;
  Findings pf;
  if (!plan_conversion(in, mode, remap, plan, pf)) return;  // reported above
  CheckpointVerifier::plan_converted(be, o, in, out, plan, jobs);
  run_jobs(jobs, be, o, r);
}

// Content findings (a part's hash or source bytes differ) still leave every range valid:
// decode anyway, so the report names the element that changed.
bool pack_geometry_ok(const Findings& validation) {
  return std::all_of(validation.items().begin(), validation.items().end(), [](const Finding& f) {
    return f.severity != Severity::error || f.code == "PACK_PART_HASH" || f.code == "PACK_SOURCE_MISMATCH" ||
           f.code == "PACK_DENSE_MISMATCH" || f.code == "PACK_A_LOG_MISMATCH";
  });
}

// The checks of the manifest's text against experts.bin's actual size (names, alignment,
// every blob and part inside the file and sized as its type and shape say): what bounds
// the jobs' reads and buffers. Cheap (no payload byte is read).
bool pack_quick_geometry_ok(const std::string& dir, const PackManifest& m) {
  std::error_code ec;
  const uint64_t experts_size = fs::file_size(fs::path(dir) / m.experts_name, ec);
  if (ec) return false;
  std::string text;
  IoError err;
  if (!read_input_file((fs::path(dir) / kPackManifestFile).string(), uint64_t{1} << 30, text, err)) return false;
  Findings quick;
  check_pack_manifest_text(text, (fs::path(dir) / kPackManifestFile).string(), experts_size, quick);
  return !quick.has_errors();
}

// Joins a thread when the scope ends, however it ends.
struct Joined {
  std::thread t;
  ~Joined() {
    if (t.joinable()) t.join();
  }
};

// An expert pack: validate_expert_pack first (manifest, experts.bin's geometry and part
// hashes, dense.gguf; with the reference its SHA-256 and every part byte-equal to its
// source slice), then every blob part decoded against its source. The validation is one
// thread's pass over each file, so when the manifest's geometry passes the quick check
// above it runs on a thread of its own beside the decode jobs, and the jobs' results are
// kept only if the full validation leaves every range valid: the report (validation
// findings first, then the jobs' in job order) is the same as when it ran first.
void verify_pack(const std::string& path, DecodeBackend& be, const VerifyOptions& o, VerifyReport& r) {
  r.kind = "expert-pack";
  PackManifest m;
  Findings mf;
  const bool manifest_read = read_pack_manifest(path, m, mf);
  if (!manifest_read || !pack_quick_geometry_ok(path, m)) {  // one after the other, as always
    validate_expert_pack(path, o.reference, false, r.findings);
    if (!pack_geometry_ok(r.findings)) return;
    if (!manifest_read) return add_errors(mf, r.findings);
    std::vector<Job> jobs;
    PackPlan pack;
    if (pack.plan(be, o, path, m, o.reference, jobs, r.findings)) run_jobs(jobs, be, o, r, &pack.ahead);
    return;
  }
  Findings validation, plan_findings;
  VerifyReport decoded;
  std::vector<Job> jobs;
  PackPlan pack;
  bool planned = false;
  {
    Joined validator{std::thread([&] { validate_expert_pack(path, o.reference, false, validation); })};
    planned = pack.plan(be, o, path, m, o.reference, jobs, plan_findings);
    if (planned) run_jobs(jobs, be, o, decoded, &pack.ahead);
  }
  r.findings.append(validation);
  if (!pack_geometry_ok(validation)) return;
  r.findings.append(plan_findings);
  if (!planned) return;
  for (auto& c : decoded.checks) r.checks.push_back(std::move(c));
  r.findings.append(decoded.findings);
  r.input_bytes_decoded = decoded.input_bytes_decoded;
  r.max_rel_l2 = decoded.max_rel_l2;
  r.jobs = decoded.jobs;
  r.jobs_in_flight = decoded.jobs_in_flight;
  r.stages = decoded.stages;
}

}  // namespace

uint64_t VerifyReport::failed() const {
  return static_cast<uint64_t>(std::count_if(checks.begin(), checks.end(), [](const VerifyCheck& c) { return !c.ok; }));
}

VerifyReport verify_path(const std::string& path, DecodeBackend& backend, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  VerifyReport r;
  r.path = path;
  r.reference = options.reference;
  SerialBackend serial(backend);
  TimedBackend be(backend.concurrent() ? backend : static_cast<DecodeBackend&>(serial));
  if (is_expert_pack(path)) {
    verify_pack(path, be, options, r);
  } else {
    verify_safetensors(path, be, options, r);
  }
  be.around.add_to(r.stages);
  r.backend = backend.name();  // after the jobs: an opening backend's name waits for its device
  report_nothing_verified(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

}  // namespace ckpt
