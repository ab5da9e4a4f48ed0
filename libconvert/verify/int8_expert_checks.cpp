// The verifier's INT8-shift expert and GEMM checks (verify/int8_expert_checks.h): the remap
// of IN's experts against OUT's slabs, the device decode against the CPU's, the device
// activation quantization and INT8 GEMM against the CPU's, the device's original MXFP4
// weights against the CPU's and the GEMM's error against the product with them.
#include "verify/int8_expert_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "numerics/int8_gemm_ref.h"
#include "numerics/int8_shift.h"
#include "numerics/mxfp4.h"
#include "verify/verifier.h"

namespace ckpt {
namespace {

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

class Int8ExpertVerifier : public Verifier {
 public:
  Int8ExpertVerifier(DecodeBackend& backend, const VerifyOptions& o, Sink& r) : Verifier(backend, o, r) {}

  static const MappedFile& file_of(const LoadedModel& m, const ModelTensor& t) { return m.checkpoint.shards[t.file].file; }
  // "FILE tensor W1 + FILE tensor W3": the reference's weights of one expert.
  static std::string source_names(const LoadedModel& in, const std::vector<std::pair<size_t, size_t>>& parts) {
    std::string out;
    for (const auto& [w, s] : parts) {
      const ModelTensor& t = in.view.tensors[w];
      out += (out.empty() ? "" : " + ") + in.view.file_paths[t.file] + " tensor " + t.name + " (scales " +
             in.view.tensors[s].name + ")";
    }
    return out;
  }

  // Expert e of an INT8-shift tensor of a checkpoint alone: decode (and GEMM), device against CPU.
  void verify_alone(const LoadedModel& model, const ModelTensor& t, const ModelTensor& sh, const ModelTensor& cs,
                    const RemapParams& p, uint64_t e, bool gemm) {
    PooledSteps bufs(r_.steps, true);
    ExpertBuffers& b = *bufs->expert;
    Lap lap;
    size_slabs(p, b.got);
    r_.stages.buffers += lap.next();
    const std::string& file = model.view.file_of(t);
    if (!read_slabs(model, t, sh, cs, e, b.got)) return;
    if (!verify_decode(file, t.name, e, p, b, gemm)) return;
    if (gemm) verify_gemm(file, t.name, e, p, b, nullptr);
  }

  // Expert e of one fused INT8-shift matrix of OUT against the remap of IN's MXFP4 experts.
  void verify_fused_expert(const LoadedModel& in, const LoadedModel& out, const FusedMatrix& fm, const ModelTensor& mx,
                           const ModelTensor& sh_t, const ModelTensor& cs_t, uint64_t e) {
    const ModelTensor* sh = &sh_t;
    const ModelTensor* cs = &cs_t;
    const RemapParams& p = fm.params;
    const std::string file = out.view.file_of(mx);
    const std::string sources = source_names(in, fm.parts[e]);
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
      VerifyCheck& bc = add_check("int8_shift_bytes", mx.name, "expert " + std::to_string(e), p.rows * p.k,
                                  "CPU remap of reference " + sources);
      const bool remap_failed = remap_expert_mxfp4(parts, p, want.mxfp4, nullptr) ||
                                remap_expert_shift2(parts, p, want.shift2) ||
                                remap_expert_channel_scale(parts, p, want.channel_scale);
      r_.stages.cpu_reference += lap.next();
      if (remap_failed)
        return fail(bc, "VERIFY_INPUT", in.path, std::nullopt,
                    "the reference experts cannot be remapped (expert " + std::to_string(e) + ")");
      const bool slabs_equal = compare_slabs(bc, out, mx, *sh, *cs, p, e, got, want);
      r_.stages.compare += lap.next();
      if (!slabs_equal) return;
      const bool gemm = o_.gemm_experts == 0 || e < o_.gemm_experts;
      if (!verify_decode(file, mx.name, e, p, b, gemm) || !gemm) return;
      if (!verify_mxfp4(file, mx.name, e, p, parts, sources, b)) return;
      verify_gemm(file, mx.name, e, p, b, &parts);
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
    const std::string expert = "expert " + std::to_string(e);
    VerifyCheck& c = add_check("int8_shift_decode", tensor, expert, p.rows * p.k,
                               "CPU decode of the same slabs (" + file + " tensor " + tensor + " " + expert + ")");
    const Slabs& got = b.got;
    auto cannot_decode = [&] { fail(c, "VERIFY_LAYOUT", file, std::nullopt, expert + " cannot be decoded"); };
    Lap lap;
    std::string error;
    auto by_digest = [&] {
      if (!digest) return StepDigest::off;
      F32Digest cpu, device;
      if (!int8_shift_digest(got.mxfp4, got.shift2, p, *r_.digest, cpu)) return cannot_decode(), StepDigest::failed;
      r_.stages.cpu_reference += lap.next();
      if (!be_.int8_shift_digest(got.mxfp4, got.shift2, p, *r_.digest, device, error))
        return backend_failed(c, file, error), StepDigest::failed;
      r_.input_bytes_decoded += got.mxfp4.size() + got.shift2.size();
      lap.next();  // the device's time: TimedBackend
      return cpu == device ? StepDigest::equal : StepDigest::differ;
    };
    // Column pieces of the expert (whole shift bytes), each decoded on both sides and
    // compared while both are in cache; one piece when the whole CPU decode is kept.
    auto every_element = [&] {
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
        if (!decode_int8_shift(piece.mxfp4, piece.shift2, piece.p, q_cpu)) return cannot_decode(), false;
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
      if (!first) return true;
      mismatch(c, file, std::nullopt,
               expert + " row " + std::to_string(first->row) + " column " + std::to_string(first->column) +
                   ": device decode " + std::to_string(first->device) + " vs CPU " + std::to_string(first->cpu));
      return false;
    };
    return compare_step(c, file, expert + "'s decode", "decode equals the CPU's", by_digest, every_element);
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
    VerifyCheck& qc = add_check("activation_quant", tensor, part, m * k,
                                "CPU quantization of the same random BF16 activations");
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
    VerifyCheck& gc = add_check("int8_gemm", tensor, part, m * n,
                                "CPU INT8 GEMM of the same activations and slabs (" + file + " tensor " + tensor + " " +
                                    part + ")" + (original ? "; rel_l2 against the product with the reference's MXFP4 weights" : ""));
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
                          verify_hex(out_dev[*i], 4) + " vs CPU " + verify_hex(out_cpu[*i], 4));
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
    if (!(rel <= o_.max_rel_l2))
      fail(gc, "VERIFY_GEMM_ERROR", file, std::nullopt,
           part + ": INT8 GEMM relative L2 error " + verify_fmt(rel) + " against the original weights exceeds " + verify_fmt(o_.max_rel_l2));
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
               expert + " element [" + std::to_string(row) + ", " + std::to_string(col) + "]: code " + verify_hex(gc, 1) +
                   " (decodes to " + std::to_string(kE2m1LutX2[gc] * (1 << shift)) + ") vs remap of the reference " +
                   verify_hex(wc, 1) + " (" + std::to_string(kE2m1LutX2[wc] * (1 << shift)) + ")");
      return false;
    }
    if (auto i = first_difference<uint8_t>(got.shift2, want.shift2)) {
      c.tensor = sh.name;
      mismatch(c, out.view.file_of(sh), sh.offset + e * got.shift2.size() + *i,
               expert + " shift2 byte " + std::to_string(*i) + ": " + verify_hex(got.shift2[*i], 2) + " vs remap of the reference " +
                   verify_hex(want.shift2[*i], 2));
      return false;
    }
    if (auto i = first_difference<uint8_t>(got.channel_scale, want.channel_scale)) {
      c.tensor = cs.name;
      const uint64_t row = *i / 4;
      float g, w;
      std::memcpy(&g, got.channel_scale.data() + 4 * row, 4);
      std::memcpy(&w, want.channel_scale.data() + 4 * row, 4);
      mismatch(c, out.view.file_of(cs), cs.offset + e * got.channel_scale.size() + 4 * row,
               expert + " channel_scale[" + std::to_string(row) + "]: " + verify_fmt(g) + " vs remap of the reference " + verify_fmt(w));
      return false;
    }
    return true;
  }

  // The original weights on the device and on the CPU: lut_x2[c] * 2^(b - 128), exactly;
  // each part in steps of at most 1M elements (b.w_step), so the GEMM check's memory does not
  // hold the expert's f32 matrix (its double product decodes its rows itself, original_rows,
  // the values proven equal here).
  bool verify_mxfp4(const std::string& file, const std::string& tensor, uint64_t e, const RemapParams& p,
                    const std::vector<RemapPart>& parts, const std::string& sources, ExpertBuffers& b) {
    VerifyCheck& c = add_check("mxfp4_dequant", tensor, "expert " + std::to_string(e), p.rows * p.k,
                               "CPU decode of reference " + sources);
    // The remap has accepted these parts; the steps and original_rows index them, so their
    // sizes are checked here again rather than trusted.
    uint64_t rows = 0;
    for (const RemapPart& part : parts) {
      if (part.weight.size() != part.rows * p.k / 2 || part.scale.size() != part.rows * p.k / 32) rows = UINT64_MAX;
      if (rows != UINT64_MAX) rows += part.rows;
    }
    if (p.k % 32 || rows != p.rows) {
      fail(c, "VERIFY_LAYOUT", file, std::nullopt,
           "expert " + std::to_string(e) + ": its MXFP4 parts do not make a [" + std::to_string(p.rows) + ", " +
               std::to_string(p.k) + "] matrix");
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
                 std::to_string(i % k) + "]: device " + verify_fmt(dst[i]) + " vs CPU " + verify_fmt(want_of(i)));
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
};

}  // namespace

void plan_fused_expert_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& in, const LoadedModel& out,
                              const FusedMatrix& fm, const ModelTensor& mx, const ModelTensor& sh,
                              const ModelTensor& cs, std::vector<Job>& jobs) {
  for (uint64_t e = 0; e < fm.experts; ++e) {
    const bool gemm = o.gemm_experts == 0 || e < o.gemm_experts;
    jobs.push_back({expert_job_memory(fm.params, true, gemm, o.tokens), [&be, &o, &in, &out, &fm, &mx, &sh, &cs, e](Sink& s) {
                      Int8ExpertVerifier(be, o, s).verify_fused_expert(in, out, fm, mx, sh, cs, e);
                    }});
  }
}

void plan_int8_experts_alone(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model,
                             std::vector<Job>& jobs) {
  auto error_job = [&jobs](std::string file, std::string tensor, std::string message) {
    jobs.push_back({0, [file, tensor, message](Sink& s) {
                      s.findings.error("VERIFY_LAYOUT", file, tensor, std::nullopt, message);
                    }});
  };
  for (const auto& t : model.view.tensors) {
    if (!t.name.ends_with(".mxfp4") || t.name.find(".ffn.experts.") == std::string::npos) continue;
    const std::string stem = t.name.substr(0, t.name.size() - 6);
    const ModelTensor* sh = model.view.find(stem + ".shift2");
    const ModelTensor* cs = model.view.find(stem + ".channel_scale");
    if (!sh || !cs || t.shape.size() != 4 || cs->shape.size() != 2 || !t.payload_ok || !sh->payload_ok ||
        !cs->payload_ok) {
      error_job(model.view.file_of(t), t.name, "INT8-shift tensor without matching .shift2 / .channel_scale of the expected ranks");
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
                        Int8ExpertVerifier(be, o, s).verify_alone(model, t, *sh, *cs, p, e, gemm);
                      }});
    }
  }
}

}  // namespace ckpt
