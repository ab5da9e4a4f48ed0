// The verifier's safetensors checkpoint checks: FP8 tensors dequantized on the device
// against OUT's BF16 (a conversion) or the CPU's of the same bytes (a checkpoint alone),
// MXFP4 expert weights likewise (DeepSeek routed experts; gpt-oss experts of a
// --experts bf16 conversion, decoded and transposed), and copied tensors byte for byte.
// INT8-shift experts are planned here and checked in verify/int8_expert_checks.
#include "verify/checkpoint_checks.h"

#include <algorithm>
#include <cstring>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "model/pairing.h"
#include "model/scale_weight.h"
#include "numerics/fp8.h"
#include "numerics/mxfp4.h"
#include "numerics/scale_rule.h"
#include "verify/int8_expert_checks.h"
#include "verify/verifier.h"

namespace ckpt {
namespace {

constexpr uint64_t kCopyStep = uint64_t{16} << 20;
// Bytes per step of a copy check (each side): the job memory and the loop use the same.
uint64_t copy_step(uint64_t chunk) { return std::max<uint64_t>(1, std::min(chunk, kCopyStep)); }

const MappedFile& file_of(const LoadedModel& m, const ModelTensor& t) { return m.checkpoint.shards[t.file].file; }
// The path of the file holding `t`, as verified_against names it.
const std::string& path_of(const LoadedModel& m, const ModelTensor& t) { return m.view.file_paths[t.file]; }

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
      jobs.push_back({0, [&be, &o, &in, &out, &w, &dst](Sink& sink) {
                        GptOssExpertVerifier v(be, o, sink);
                        VerifyCheck& c = v.add_check("mxfp4_dequant", dst.name, "", 0,
                                                     "reference " + path_of(in, w) + " tensor " + w.name);
                        v.fail(c, "VERIFY_LAYOUT", out.view.file_of(dst), std::nullopt,
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
  static uint16_t le16(const std::vector<uint8_t>& b, uint64_t i) {
    return static_cast<uint16_t>(b[2 * i] | (b[2 * i + 1] << 8));
  }

  void verify_expert(const LoadedModel& in, const LoadedModel& out, const PlannedTensor& pt, const ModelTensor& w,
                     const ModelTensor& s, const ModelTensor& dst, uint64_t e) {
    const uint64_t rows = pt.rows, k = pt.k, nk = rows * k;
    const std::string part = "expert " + std::to_string(e);
    const std::string out_file = out.view.file_of(dst), in_file = in.view.file_of(w);
    VerifyCheck& c = add_check("mxfp4_dequant", dst.name, part, nk,
                               "CPU decode of reference " + path_of(in, w) + " tensor " + w.name + " (scales " + s.name + ") " +
                                   part + ", transposed; and the converted bytes");
    std::vector<uint8_t> blocks(nk / 2), scales(nk / 32), got(2 * nk), want(2 * nk), device(2 * nk), scratch;
    if (!read(file_of(in, w), w.offset + e * (nk / 2), blocks, &c) ||
        !read(file_of(in, s), s.offset + e * (nk / 32), scales, &c) ||
        !read(file_of(out, dst), dst.offset + e * 2 * nk, got, &c))
      return;
    if (!scale_rule_holds(c, in.view.file_of(s), ScaleEncoding::mxfp4_e8m0, s, scales, e * (nk / 32), w.name)) return;
    // The CPU reference first: input convert refuses (E8M0 0xFF, a product beyond BF16) has
    // no converted value to compare with.
    if (auto fault = dequant_mxfp4_transposed(blocks, scales, rows, k, e * rows, scratch, want)) {
      const uint64_t i = fault->element >= e * nk ? fault->element - e * nk : 0;
      return fail(c, "VERIFY_INPUT", in_file, w.offset + e * (nk / 2) + i / 2,
                  part + ": the input blocks cannot be dequantized (" + mxfp4_fault_name(fault->kind) + " at row " +
                      std::to_string(i / k) + ", column " + std::to_string(i % k) + ")",
                  &w.name);
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
    auto value = [](uint16_t b) { return verify_hex(b, 4) + " (" + verify_fmt(bf16_value(b)) + ")"; };
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
                            (CheckpointVerifier(be, o, s).*check)(in, out, plan, pt, *dst);
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
            plan_fused_expert_checks(be, o, in, out, fm, *dst, *sh, *cs, jobs);
            break;
          }
          case TensorAction::remap_shift2:
          case TensorAction::remap_channel_scale: break;  // checked with their .mxfp4 tensor
          case TensorAction::dequant_mxfp4_blocks:  // gpt-oss experts: one job per expert
            GptOssExpertVerifier::plan(be, o, in, out, pt, *dst, jobs);
            break;
          case TensorAction::regrid_scale: {  // ckpt relayout: OUT's weight on its new grid, on the device
            const ModelTensor* w = fp8_weight_of_scale(out.view, dst->name);
            if (!w || !w->payload_ok) break;  // reported by the reference check
            job(fp8_job_memory(*w, *dst, be.max_chunk_bytes()) + 4 * in.view.tensors[pt.input].nbytes,
                &CheckpointVerifier::planned_regrid);
            break;
          }
        }
      }
    }
  }

  // A checkpoint alone: its FP8 pairs and MXFP4 expert weights, device against CPU.
  static void plan_alone(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model, const ConversionPlan& plan,
                         std::vector<Job>& jobs) {
    for (const auto& shard : plan.shards)
      for (const auto& pt : shard.tensors) {
        const ModelTensor& src = model.view.tensors[pt.input];
        if (pt.action == TensorAction::dequant_e8m0 || pt.action == TensorAction::dequant_f32) {
          jobs.push_back({fp8_job_memory(src, model.view.tensors[pt.scale], be.max_chunk_bytes()),
                          [&be, &o, &model, &plan, &pt, &src](Sink& s) {
                            CheckpointVerifier(be, o, s).verify_fp8(model, plan, pt, src, nullptr, nullptr);
                          }});
        } else if (pt.action == TensorAction::dequant_mxfp4 || pt.action == TensorAction::dequant_mxfp4_blocks) {
          // A DeepSeek routed expert [rows, k/2], or a gpt-oss _blocks tensor: its E·R rows of K.
          const bool blocks = pt.action == TensorAction::dequant_mxfp4_blocks;
          const uint64_t rows = blocks ? std::max<uint64_t>(1, pt.experts) * pt.rows : (src.shape.empty() ? 0 : src.shape[0]);
          const uint64_t k = blocks ? pt.k : mxfp4_k(src);
          jobs.push_back({mxfp4_job_memory(src.nbytes, k, be.max_chunk_bytes()), [&be, &o, &model, &pt, &src, rows, k](Sink& s) {
                            CheckpointVerifier(be, o, s).verify_mxfp4_bf16(model, src, model.view.tensors[pt.scale], rows,
                                                                           k, nullptr, nullptr);
                          }});
        }
      }
  }

 private:
  void planned_copy(const LoadedModel& in, const LoadedModel& out, const ConversionPlan&, const PlannedTensor& pt,
                    const ModelTensor& dst) {
    verify_copy(in, out, in.view.tensors[pt.input], dst);
  }
  void planned_fp8(const LoadedModel& in, const LoadedModel& out, const ConversionPlan& plan, const PlannedTensor& pt,
                   const ModelTensor& dst) {
    verify_fp8(in, plan, pt, in.view.tensors[pt.input], &out, &dst);
  }
  // ckpt relayout: OUT's FP8 weight decoded by the device with OUT's re-gridded scales on the
  // new block equals the CPU's exact decode of IN's weight with IN's scales on the old one.
  void planned_regrid(const LoadedModel& in, const LoadedModel& out, const ConversionPlan& plan, const PlannedTensor& pt,
                      const ModelTensor& dst) {
    const ModelTensor& in_scale = in.view.tensors[pt.input];
    const ModelTensor* in_w = fp8_weight_of_scale(in.view, in_scale.name);
    const ModelTensor* out_w = fp8_weight_of_scale(out.view, dst.name);
    const std::string file = out.view.file_of(dst);
    VerifyCheck& c = add_check("fp8_regrid", out_w ? out_w->name : dst.name, "", in_w ? in_w->nbytes : 0,
                               "CPU decode of reference " + path_of(in, in_scale) + " with " + in_scale.name +
                                   " on its " + std::to_string(pt.block_rows) + "x" + std::to_string(pt.block_cols) +
                                   " block");
    if (!in_w || !out_w || in_w->shape != out_w->shape || in_w->shape.size() != 2)
      return fail(c, "VERIFY_INPUT", file, dst.offset, "the FP8 weight of scale " + dst.name + " is missing or differs in shape",
                  &dst.name);
    const Fp8Grid g_in{pt.rows, pt.k, pt.block_rows, pt.block_cols}, g_out{pt.rows, pt.k, plan.regrid_rows, plan.regrid_cols};
    const bool e8m0 = in_scale.dtype && (*in_scale.dtype == Dtype::F8_E8M0 || *in_scale.dtype == Dtype::U8);
    const Fp8ScaleKind kind = e8m0 ? Fp8ScaleKind::e8m0 : Fp8ScaleKind::f32;
    std::vector<uint8_t> grid_in(in_scale.nbytes), grid_out(dst.nbytes);
    if (!read(file_of(in, in_scale), in_scale.offset, grid_in, &c) || !read(file_of(out, dst), dst.offset, grid_out, &c)) return;
    std::vector<float> f32_in, f32_out;
    if (!e8m0) {
      if (!in_scale.dtype || !dst.dtype || !scale_grid_to_f32(*in_scale.dtype, grid_in, f32_in) ||
          !scale_grid_to_f32(*dst.dtype, grid_out, f32_out))
        return fail(c, "VERIFY_INPUT", file, dst.offset, "scale dtype " + dst.type + " cannot be widened to F32 multipliers",
                    &dst.name);
      grid_out.resize(4 * f32_out.size());
      if (!f32_out.empty()) std::memcpy(grid_out.data(), f32_out.data(), grid_out.size());
    }
    const uint64_t rows_per_step = fp8_rows_per_step(pt.k, chunk_bytes());
    const uint64_t step = std::min(rows_per_step, pt.rows) * pt.k;
    std::vector<uint8_t> a(step), b(step), want_bytes(2 * step);
    std::vector<uint16_t> got(step), want(step);
    for (uint64_t row = 0; row < pt.rows; row += rows_per_step) {
      const uint64_t n = std::min(rows_per_step, pt.rows - row) * pt.k;
      std::span<uint8_t> sa(a.data(), n), sb(b.data(), n), wb(want_bytes.data(), 2 * n);
      if (!read(file_of(in, *in_w), in_w->offset + row * pt.k, sa, &c) ||
          !read(file_of(out, *out_w), out_w->offset + row * pt.k, sb, &c))
        return;
      if (auto fault = e8m0 ? dequant_fp8_rows_e8m0(sa, row, g_in, grid_in, wb) : dequant_fp8_rows_f32(sa, row, g_in, f32_in, wb))
        return fail(c, "VERIFY_INPUT", in.view.file_of(*in_w), in_w->offset + fault->element,
                    std::string("FP8 tensor cannot be dequantized: ") + fp8_fault_name(fault->kind), &in_w->name);
      std::string error;
      if (!be_.fp8_to_bf16(sb, row, g_out, kind, grid_out, std::span<uint16_t>(got.data(), n), error)) {
        backend_failed(c, file, error);
        return;
      }
      r_.input_bytes_decoded += n;
      std::memcpy(want.data(), wb.data(), 2 * n);
      if (const auto i = first_difference<uint16_t>(std::span<const uint16_t>(got.data(), n),
                                                    std::span<const uint16_t>(want.data(), n))) {
        const uint64_t element = row * pt.k + *i;
        return mismatch(c, out.view.file_of(*out_w), out_w->offset + element,
                        "element " + std::to_string(element) + " (row " + std::to_string(element / pt.k) + ", column " +
                            std::to_string(element % pt.k) + "): device decode on the new grid " + verify_hex(got[*i], 4) +
                            " vs the input's on the old " + verify_hex(want[*i], 4));
      }
    }
  }

  void planned_mxfp4(const LoadedModel& in, const LoadedModel& out, const ConversionPlan&, const PlannedTensor& pt,
                     const ModelTensor& dst) {
    const ModelTensor& w = in.view.tensors[pt.input];
    verify_mxfp4_bf16(in, w, in.view.tensors[pt.scale], w.shape.empty() ? 0 : w.shape[0], mxfp4_k(w), &out, &dst);
  }

  void verify_copy(const LoadedModel& in, const LoadedModel& out, const ModelTensor& src, const ModelTensor& dst) {
    VerifyCheck& c = add_check("copy", dst.name, "", src.nbytes,
                               "bytes of reference " + path_of(in, src) + " tensor " + src.name);
    PooledSteps bufs(r_.steps);
    const uint64_t step = std::min(copy_step(chunk_bytes()), src.nbytes);
    const std::span<uint8_t> a = StepBuffers::take(bufs->a, step), b = StepBuffers::take(bufs->b, step);
    for (uint64_t done = 0; done < src.nbytes; done += a.size()) {
      const uint64_t n = std::min<uint64_t>(a.size(), src.nbytes - done);
      std::span<uint8_t> sa(a.data(), n), sb(b.data(), n);
      if (!read(file_of(in, src), src.offset + done, sa, &c) || !read(file_of(out, dst), dst.offset + done, sb, &c)) return;
      if (auto i = first_difference<uint8_t>(sa, sb)) {
        mismatch(c, out.view.file_of(dst), dst.offset + done + *i,
                 "copied tensor differs from the input at byte " + std::to_string(done + *i) + ": " +
                     verify_hex(b[*i], 2) + " vs input " + verify_hex(a[*i], 2));
        return;
      }
    }
  }

  // Whether BF16 steps of `elems` elements are compared by digest (DecodeBackend::has_bf16_digest).
  bool bf16_digest_steps(uint64_t elems) const {
    return be_.has_bf16_digest() && !o_.full_compare && r_.digest && elems <= kDigestMaxElems;
  }
  // The device's digest of a step against the CPU's of OUT's BF16 bytes (counted in compare).
  StepDigest digests_agree(const F32Digest& device, std::span<const uint8_t> out_bytes) {
    Lap lap;
    const bool same = device == bf16_digest(out_bytes, 0, *r_.digest);
    r_.stages.compare += lap.next();
    return same ? StepDigest::equal : StepDigest::differ;
  }

  // Device dequantization of an FP8 weight. With `out`, it must equal OUT's BF16 bytes;
  // without, the CPU dequantization of the same input.
  void verify_fp8(const LoadedModel& in, const ConversionPlan& plan, const PlannedTensor& pt, const ModelTensor& src,
                  const LoadedModel* out, const ModelTensor* dst) {
    const std::string tensor = dst ? dst->name : src.name;
    const std::string file = dst ? out->view.file_of(*dst) : in.view.file_of(src);
    const ModelTensor& scale = in.view.tensors[pt.scale];
    const std::string source = path_of(in, src) + " tensor " + src.name + " (scales " + scale.name + ")";
    VerifyCheck& c = add_check("fp8_dequant", tensor, "", src.nbytes,
                               out ? "device decode of reference " + source
                                   : "CPU decode of " + source);
    std::vector<uint8_t> grid(scale.nbytes);
    if (!read(file_of(in, scale), scale.offset, grid, &c)) return;
    const Fp8Grid g = planned_fp8_grid(plan, pt, src);
    const Fp8ScaleKind kind = pt.action == TensorAction::dequant_e8m0 ? Fp8ScaleKind::e8m0 : Fp8ScaleKind::f32;
    if (!scale_rule_holds(c, in.view.file_of(scale), kind == Fp8ScaleKind::e8m0 ? ScaleEncoding::fp8_e8m0 : ScaleEncoding::fp8_multiplier,
                          scale, grid, 0, src.name))
      return;
    // Multipliers reach both sides as F32 (BF16/F16 scales widened exactly, model/pairing.h).
    std::vector<float> grid_f32;
    if (kind == Fp8ScaleKind::f32) {
      if (!scale.dtype || !scale_grid_to_f32(*scale.dtype, grid, grid_f32))
        return fail(c, "VERIFY_INPUT", in.view.file_of(scale), scale.offset,
                    "scale dtype " + scale.type + " cannot be widened to F32 multipliers", &scale.name);
      grid.resize(4 * grid_f32.size());
      if (!grid_f32.empty()) std::memcpy(grid.data(), grid_f32.data(), grid.size());
    }
    const uint64_t rows_per_step = fp8_rows_per_step(g.cols, chunk_bytes());
    PooledSteps bufs(r_.steps);
    const uint64_t step = std::min(rows_per_step, g.rows) * g.cols;
    const std::span<uint8_t> w = StepBuffers::take(bufs->a, step), want_bytes = StepBuffers::take(bufs->b, 2 * step);
    const std::span<uint16_t> got = StepBuffers::take(bufs->h1, step), want = StepBuffers::take(bufs->h2, step);
    // A conversion's BF16 is compared by digest where the backend has one (16 bytes back per
    // step); a step whose digests differ is compared element by element.
    const bool digest = out && bf16_digest_steps(step);
    for (uint64_t row = 0; row < g.rows; row += rows_per_step) {
      const uint64_t rows = std::min(rows_per_step, g.rows - row), n = rows * g.cols;
      std::span<uint8_t> ws(w.data(), n), wb(want_bytes.data(), 2 * n);
      if (!read(file_of(in, src), src.offset + row * g.cols, ws, &c)) return;
      // OUT's bytes, or the CPU's dequantization of the same input.
      if (out) {
        if (!read(file_of(*out, *dst), dst->offset + row * g.cols * 2, wb, &c)) return;
      } else if (auto fault = kind == Fp8ScaleKind::e8m0 ? dequant_fp8_rows_e8m0(ws, row, g, grid, wb)
                                                          : dequant_fp8_rows_f32(ws, row, g, grid_f32, wb)) {
        // fault->element is the element's index in the whole weight: one byte each.
        return fail(c, "VERIFY_INPUT", file, src.offset + fault->element,
                    std::string("FP8 tensor cannot be dequantized: ") + fp8_fault_name(fault->kind));
      }
      std::string error;
      auto by_digest = [&] {
        if (!digest) return StepDigest::off;
        F32Digest device;
        if (!be_.fp8_bf16_digest(ws, row, g, kind, grid, *r_.digest, device, error))
          return backend_failed(c, file, error), StepDigest::failed;
        r_.input_bytes_decoded += n;
        return digests_agree(device, wb);
      };
      auto every_element = [&] {
        if (!be_.fp8_to_bf16(ws, row, g, kind, grid, std::span<uint16_t>(got.data(), n), error))
          return backend_failed(c, file, error);
        if (!digest) r_.input_bytes_decoded += n;
        std::memcpy(want.data(), wb.data(), 2 * n);
        const auto i = first_difference<uint16_t>(std::span<const uint16_t>(got.data(), n),
                                                  std::span<const uint16_t>(want.data(), n));
        if (!i) return true;
        const uint64_t element = row * g.cols + *i;
        const std::optional<uint64_t> offset =
            out ? std::optional<uint64_t>(dst->offset + element * 2) : std::optional<uint64_t>(src.offset + element);
        mismatch(c, file, offset,
                 "element " + std::to_string(element) + " (row " + std::to_string(element / g.cols) + ", column " +
                     std::to_string(element % g.cols) + "): device dequant " + verify_hex(got[*i], 4) + " (" +
                     verify_fmt(bf16_value(got[*i])) + ") vs " + (out ? "converted " : "CPU ") + verify_hex(want[*i], 4) +
                     " (" + verify_fmt(bf16_value(want[*i])) + ")");
        return false;
      };
      if (!compare_step(c, file, step_at(out ? dst->offset + row * g.cols * 2 : src.offset + row * g.cols),
                        "BF16 results equal the converted bytes", by_digest, every_element))
        return;
    }
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
    const std::string source = path_of(in, w) + " tensor " + w.name + " (scales " + s.name + ")";
    VerifyCheck& c = add_check("mxfp4_dequant", named.name, "", rows * k,
                               dst ? "device decode of reference " + source
                                   : "CPU decode of " + source);
    if (rows == 0 || k == 0 || k % 32 || w.nbytes != rows * k / 2 || s.nbytes != rows * k / 32 ||
        (dst && dst->nbytes != rows * k * 2)) {
      return fail(c, "VERIFY_LAYOUT", file, std::nullopt,
                  dst ? "BF16 expert shape does not match its MXFP4 source"
                      : "MXFP4 weight and scale sizes do not make a [" + std::to_string(rows) + ", " + std::to_string(k) +
                            "] matrix");
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
      if (!read(file_of(in, w), w.offset + row * k / 2, ws, &c) || !read(file_of(in, s), s.offset + row * k / 32, ss, &c) ||
          (dst && !read(file_of(*out, *dst), dst->offset + row * k * 2, os, &c)))
        return;
      if (!scale_rule_holds(c, in.view.file_of(s), ScaleEncoding::mxfp4_e8m0, s, ss, row * k / 32, w.name)) return;
      if (!dst) {
        if (auto fault = dequant_mxfp4_rows(ws, ss, k, row, os))  // E8M0 0xFF, or beyond BF16
          return fail(c, "VERIFY_INPUT", file, w.offset + fault->element / 2,
                      "element " + std::to_string(fault->element) + " (row " + std::to_string(fault->element / k) +
                          ", column " + std::to_string(fault->element % k) + ") cannot be dequantized (" +
                          mxfp4_fault_name(fault->kind) + ")",
                      &w.name);
      }
      std::string error;
      r_.input_bytes_decoded += ws.size() + ss.size();
      auto by_digest = [&] {  // 16 bytes back instead of every f32
        if (!digest) return StepDigest::off;
        F32Digest device;
        if (!be_.mxfp4_bf16_digest(ws, ss, n, k, *r_.digest, device, error))
          return backend_failed(c, file, error), StepDigest::failed;
        return digests_agree(device, os);
      };
      auto every_element = [&] {
        const std::span<float> f = StepBuffers::take(bufs->got, elems);  // only when every f32 is compared
        if (!be_.mxfp4_to_f32(ws, ss, n, k, f, error)) return backend_failed(c, file, error);
        auto got_of = [&](uint64_t i) { return bf16_from_float_rne(f[i]); };
        auto want_of = [&](uint64_t i) { return static_cast<uint16_t>(os[2 * i] | (os[2 * i + 1] << 8)); };
        const auto bad = first_index(elems, [&](uint64_t i) { return got_of(i) != want_of(i); });
        if (!bad) return true;
        const uint64_t i = *bad, element = row * k + i;
        const uint16_t got = got_of(i), want = want_of(i);
        mismatch(c, file, dst ? dst->offset + element * 2 : w.offset + element / 2,
                 "element " + std::to_string(element) + " (row " + std::to_string(element / k) + ", column " +
                     std::to_string(element % k) + "): device MXFP4 decode " + verify_hex(got, 4) + " (" +
                     verify_fmt(bf16_value(got)) + ") vs " + wanted + " " + verify_hex(want, 4) + " (" +
                     verify_fmt(bf16_value(want)) + ")");
        return false;
      };
      if (!compare_step(c, file, step_at(dst ? dst->offset + row * k * 2 : w.offset + row * k / 2),
                        dst ? "BF16 results equal the converted bytes" : "BF16 results equal the CPU's", by_digest,
                        every_element))
        return;
    }
  }
};

}  // namespace

void plan_converted_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& in, const LoadedModel& out,
                           const ConversionPlan& plan, std::vector<Job>& jobs) {
  CheckpointVerifier::plan_converted(be, o, in, out, plan, jobs);
}

void plan_checkpoint_checks(DecodeBackend& be, const VerifyOptions& o, const LoadedModel& model,
                            const ConversionPlan* plan, std::vector<Job>& jobs) {
  if (plan) CheckpointVerifier::plan_alone(be, o, model, *plan, jobs);
  plan_int8_experts_alone(be, o, model, jobs);
}

}  // namespace ckpt
