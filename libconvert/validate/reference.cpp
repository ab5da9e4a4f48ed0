#include "validate/reference.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string_view>

#include <tbb/parallel_for.h>

#include "plan/config_rewrite.h"
#include "plan/output_index.h"
#include "plan/plan.h"
#include "core/checked_math.h"
#include "formats/json.h"
#include "formats/model_files.h"
#include "model/scale_weight.h"
#include "numerics/fp8.h"
#include "numerics/int8_shift.h"
#include "numerics/mxfp4.h"
#include "sign/provenance.h"
#include "numerics/scale_regrid.h"
#include "relayout/relayout_config.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kCompareStep = 1u << 20;

struct Expected {
  const PlannedShard* shard;
  const WriterTensor* tensor;
  const PlannedTensor* planned;
};

std::string hex16(uint16_t v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%04x", v);
  return buf;
}

void compare_sets(const LoadedModel& in, const ConversionPlan& plan, const LoadedModel& out,
                  std::vector<Expected>& matched, Findings& f) {
  std::unordered_map<std::string, Expected> expected;
  for (const auto& s : plan.shards)
    for (size_t k = 0; k < s.writer_tensors.size(); ++k)
      expected.emplace(s.writer_tensors[k].name, Expected{&s, &s.writer_tensors[k], &s.tensors[k]});
  for (const auto& t : out.view.tensors) {
    auto it = expected.find(t.name);
    const std::string& file = out.view.file_of(t);
    if (it == expected.end()) {
      bool consumed = in.view.find(t.name) != nullptr;
      f.error("REF_EXTRA_TENSOR", file, t.name, t.offset,
              consumed ? "tensor " + t.name + " is a scale the conversion consumes; it must not be in the output"
                       : "tensor " + t.name + " is not in the input checkpoint");
      continue;
    }
    const Expected& e = it->second;
    std::string want_dtype = dtype_name(e.tensor->dtype);
    if (file != e.shard->name)
      f.error("REF_SHARD", file, t.name, t.offset, "tensor is in " + file + "; the input had it in " + e.shard->name);
    if (t.type != want_dtype)
      f.error("REF_DTYPE", file, t.name, t.offset, "dtype is " + t.type + ", expected " + want_dtype);
    if (t.shape != e.tensor->shape)
      f.error("REF_SHAPE", file, t.name, t.offset,
              "shape is " + shape_to_string(t.shape) + ", expected " + shape_to_string(e.tensor->shape));
    if (file == e.shard->name && t.type == want_dtype && t.shape == e.tensor->shape && t.payload_ok)
      matched.push_back(e);
    expected.erase(it);
  }
  for (const auto& [name, e] : expected)
    f.error("REF_MISSING_TENSOR", e.shard->name, name, std::nullopt,
            "the conversion of the input writes " + name + " but the output has no such tensor");
}

// The side files a dequantized output must not carry (hf_quant_config.json: loaders would
// expect FP8) and Mistral's params.json, which must lose its quantization section.
void compare_quant_side_files(const ConversionPlan& plan, const LoadedModel& out, Findings& f) {
  const auto& present = out.checkpoint.side_files;
  for (const auto& file : plan.dropped_side_files)
    if (std::find(present.begin(), present.end(), file) != present.end())
      f.error("REF_CONFIG", file, "", std::nullopt,
              file + " is in the output although its quantization is gone: loaders would expect quantized weights");
  if (!plan.rewrites_params_json) return;
  const JsonDoc* params = nullptr;
  for (const auto& [file, doc] : out.checkpoint.side_configs)
    if (file == "params.json") params = doc.get();
  if (!params)
    f.error("REF_CONFIG", "params.json", "", std::nullopt, "the input has a params.json but the output has none");
  else if (json_get(params->root(), "quantization"))
    f.error("REF_CONFIG", "params.json", "", std::nullopt,
            "params.json still has its quantization section although nothing quantized is left");
}

// A relayout output's config.json: the recorded blocks are IN's and the one its scales have,
// quantization_config says the new block, and its exclusion lists name every BF16 module.
void compare_relayout_config(const LoadedModel& out, const ConversionPlan& plan, Findings& f) {
  const auto root = out.checkpoint.config->root();
  RelayoutRecord rec;
  std::string error;
  if (!read_relayout_record(root, rec, error)) {
    f.error("REF_CONFIG", "config.json", "", std::nullopt, error);
    return;
  }
  if (rec.old_n != plan.pairing.block_rows || rec.old_k != plan.pairing.block_cols)
    f.error("REF_CONFIG", "config.json", "", std::nullopt,
            "ckptkit_relayout.weight_block_size_before is [" + std::to_string(rec.old_n) + ", " + std::to_string(rec.old_k) +
                "]; the input's weight_block_size is [" + std::to_string(plan.pairing.block_rows) + ", " +
                std::to_string(plan.pairing.block_cols) + "]");
  auto q = json_get(root, "quantization_config");
  auto block = q ? json_get(*q, "weight_block_size") : std::nullopt;
  const std::string want = std::string("[") + std::to_string(rec.block_n) + "," + std::to_string(rec.block_k) + "]";
  if (!block || json_to_string(*block) != want)
    f.error("REF_CONFIG", "config.json", "", std::nullopt,
            "quantization_config.weight_block_size is " + (block ? json_to_string(*block) : std::string("missing")) +
                "; the relayout re-gridded the scales to " + want);  // (block text: compact JSON)
  for (std::string_view key : {"ignored_layers", "modules_to_not_convert"}) {
    auto list = q ? json_get(*q, key) : std::nullopt;
    if (!list) continue;
    const std::string text = json_to_string(*list);
    for (const auto& m : rec.bf16_modules)
      if (text.find(json_quote(m)) == std::string::npos)
        f.error("REF_CONFIG", "config.json", "", std::nullopt,
                "quantization_config." + std::string(key) + " lacks " + m + ", which the relayout wrote in BF16");
  }
}

void compare_config(const LoadedModel& in, const ConversionPlan& plan, const LoadedModel& out, Findings& f) {
  if (plan.regrid_rows) {
    if (out.checkpoint.config) compare_relayout_config(out, plan, f);
    return;
  }
  compare_quant_side_files(plan, out, f);
  if (!in.checkpoint.config) return;
  const JsonDoc* cfg = out.checkpoint.config.get();
  if (!cfg) {
    f.error("REF_CONFIG", "config.json", "", std::nullopt, "the input has a config.json but the output has none");
    return;
  }
  if (json_string(cfg->root(), "torch_dtype") != "bfloat16")
    f.error("REF_CONFIG", "config.json", "", std::nullopt, "torch_dtype is not \"bfloat16\" after the conversion");
  if (plan.experts == ExpertMode::bf16 && plan.dequantized_experts > 0 &&
      json_string(cfg->root(), "expert_dtype") != "bf16")
    f.error("REF_CONFIG", "config.json", "", std::nullopt,
            "expert_dtype is not \"bf16\" although the routed experts were written as BF16");
  if (!plan.output_has_fp8 && !plan.output_has_mxfp4_experts && plan.fused.empty() &&
      json_get(cfg->root(), "quantization_config"))
    f.error("REF_CONFIG", "config.json", "", std::nullopt,
            "quantization_config is still present although nothing quantized is left: transformers would route "
            "the BF16 weights through its FP8 loader");
  if (!plan.output_has_fp8 && !plan.output_has_mxfp4_experts) return;
  auto q = json_get(cfg->root(), "quantization_config");
  simdjson::dom::array ignored;
  auto list = q ? json_get(*q, "ignored_layers") : std::nullopt;
  if (!list || list->get_array().get(ignored)) {
    f.error("REF_CONFIG", "config.json", "", std::nullopt,
            "quantization_config.ignored_layers is missing: the FP8 loader would re-quantise BF16 modules");
    return;
  }
  std::vector<std::string> need = qw_bf16_modules();
  need.insert(need.end(), plan.extra_bf16_modules.begin(), plan.extra_bf16_modules.end());
  for (const auto& module : need) {
    bool found = false;
    for (auto e : ignored)
      if (e.is_string() && e.get_string().value_unsafe() == module) found = true;
    if (!found)
      f.error("REF_CONFIG", "config.json", "", std::nullopt,
              "quantization_config.ignored_layers lacks " + module + ", which must stay BF16");
  }
}

// ---------------------------------------------------------------- the files beside the tensors

// What the documented rewrite (plan/config_rewrite.h) changes: in config.json torch_dtype,
// expert_dtype, quantization_config (its edited members: kRewrittenQuantMembers) and the
// ckptkit_conversion record; in params.json the quantization section and that record.
// Every other member must be the input's, unchanged.
constexpr std::string_view kRewrittenConfigMembers[] = {"torch_dtype", "expert_dtype", "quantization_config",
                                                        "ckptkit_conversion"};
constexpr std::string_view kRewrittenParamsMembers[] = {"quantization", "ckptkit_conversion"};
// quantization_config members the rewrite sets (the rest of it is copied or defaulted only
// when the input lacks them, so an input member must come out unchanged).
constexpr std::string_view kRewrittenQuantMembers[] = {"quant_method", "ignored_layers", "modules_to_not_convert"};
// What ckpt relayout changes (relayout/relayout_config.h): the block and the exclusion lists
// in quantization_config, and its own record; torch_dtype and the rest stay.
constexpr std::string_view kRelayoutConfigMembers[] = {"quantization_config", "ckptkit_relayout"};
constexpr std::string_view kRelayoutQuantMembers[] = {"weight_block_size", "ignored_layers", "modules_to_not_convert"};

template <size_t N>
bool listed(const std::string_view (&names)[N], std::string_view key) {
  return std::find(std::begin(names), std::end(names), key) != std::end(names);
}

// A JSON value for a message: compact, cut at 80 bytes.
std::string shown(simdjson::dom::element e) {
  std::string s = json_to_string(e);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Members of `in` (an object) missing from `out` or unequal there, and members of `out`
// that `in` lacks, except the `rewritten` ones; `where` names the object in messages.
template <size_t N>
void compare_members(simdjson::dom::element in, simdjson::dom::element out, const std::string& file,
                     const std::string& where, const std::string_view (&rewritten)[N], Findings& f) {
  simdjson::dom::object a, b;
  if (in.get_object().get(a) || out.get_object().get(b)) {
    f.error("REF_CONFIG", file, "", std::nullopt, where + " is not an object on both sides");
    return;
  }
  for (auto m : a) {
    if (listed(rewritten, m.key)) continue;
    auto o = json_get(out, m.key);
    const std::string name = where + std::string(m.key);
    if (!o)
      f.error("REF_CONFIG", file, "", std::nullopt, file + " lacks " + name + ", which the input has (" + shown(m.value) + ")");
    else if (json_to_string(*o) != json_to_string(m.value))
      f.error("REF_CONFIG", file, "", std::nullopt,
              file + " " + name + " is " + shown(*o) + "; the input has " + shown(m.value) +
                  " and the conversion does not change it");
  }
  for (auto m : b)
    if (!listed(rewritten, m.key) && !json_get(in, m.key))
      f.error("REF_CONFIG", file, "", std::nullopt,
              file + " has " + where + std::string(m.key) + ", which neither the input nor the conversion has");
}

const JsonDoc* side_config(const Checkpoint& c, const std::string& name) {
  for (const auto& [file, doc] : c.side_configs)
    if (file == name) return doc.get();
  return nullptr;
}

// config.json and params.json member by member against the input's: only the documented
// rewrite may differ.
void compare_config_members(const LoadedModel& in, const ConversionPlan& plan, const LoadedModel& out, Findings& f) {
  if (in.checkpoint.config && out.checkpoint.config && plan.regrid_rows) {
    const auto a = in.checkpoint.config->root(), b = out.checkpoint.config->root();
    compare_members(a, b, "config.json", "", kRelayoutConfigMembers, f);
    auto qa = json_get(a, "quantization_config");
    auto qb = json_get(b, "quantization_config");
    if (qa && qb) compare_members(*qa, *qb, "config.json", "quantization_config.", kRelayoutQuantMembers, f);
    else f.error("REF_CONFIG", "config.json", "", std::nullopt, "quantization_config is missing on one side");
    return;
  }
  if (in.checkpoint.config && out.checkpoint.config) {
    const auto a = in.checkpoint.config->root(), b = out.checkpoint.config->root();
    compare_members(a, b, "config.json", "", kRewrittenConfigMembers, f);
    auto qa = json_get(a, "quantization_config");
    auto qb = json_get(b, "quantization_config");
    if (qa && qb) compare_members(*qa, *qb, "config.json", "quantization_config.", kRewrittenQuantMembers, f);
  }
  if (!plan.rewrites_params_json) return;
  const JsonDoc* pa = side_config(in.checkpoint, "params.json");
  const JsonDoc* pb = side_config(out.checkpoint, "params.json");
  if (pa && pb) compare_members(pa->root(), pb->root(), "params.json", "", kRewrittenParamsMembers, f);
}

// A copied side file must hold the input's bytes: the first difference is named.
void compare_side_file(const std::string& in_path, const std::string& out_path, const std::string& rel, Findings& f) {
  MappedFile a, b;
  IoError err;
  if (!a.open(in_path, err) || !b.open(out_path, err)) {
    f.error("IO_OPEN", rel, "", std::nullopt, "cannot read: " + err.message);
    return;
  }
  std::vector<uint8_t> x(kCompareStep), y(kCompareStep);
  const uint64_t common = std::min(a.size(), b.size());
  for (uint64_t done = 0; done < common;) {
    const uint64_t n = std::min(kCompareStep, common - done);
    if (!a.read_at(done, std::span<uint8_t>(x.data(), n), err) || !b.read_at(done, std::span<uint8_t>(y.data(), n), err)) {
      f.error("IO_READ", rel, "", done, "read failed: " + err.message);
      return;
    }
    if (std::memcmp(x.data(), y.data(), n) != 0) {
      const uint64_t i = static_cast<uint64_t>(std::mismatch(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n), y.begin()).first - x.begin());
      f.error("REF_SIDE_FILE", rel, "", done + i,
              rel + " differs from the input's at byte " + std::to_string(done + i) + ": convert copies it unchanged");
      return;
    }
    done += n;
  }
  if (a.size() != b.size())
    f.error("REF_SIDE_FILE", rel, "", common,
            rel + " is " + std::to_string(b.size()) + " bytes, the input's " + std::to_string(a.size()) +
                ": convert copies it unchanged");
}

// First difference between the output's bytes and what the conversion of the input gives.
class DeepCompare {
 public:
  DeepCompare(const LoadedModel& in, const ConversionPlan& plan, const LoadedModel& out)
      : in_(in), plan_(plan), out_(out) {}

  void run(const std::vector<Expected>& matched, Findings& f) {
    tbb::parallel_for(size_t{0}, matched.size(), [&](size_t i) {
      std::string message;
      uint64_t offset = 0;
      if (!compare(matched[i], message, offset)) {
        std::lock_guard lock(mutex_);
        const ModelTensor* t = out_.view.find(matched[i].tensor->name);
        f.error(matched[i].planned->action == TensorAction::copy ? "REF_BYTES_DIFFER" : "REF_CONVERTED_DIFFER",
                out_.view.file_of(*t), t->name, offset, message);
      }
    });
  }

 private:
  const MappedFile& in_file(const ModelTensor& t) const { return in_.checkpoint.shards[t.file].file; }
  const MappedFile& out_file(const ModelTensor& t) const { return out_.checkpoint.shards[t.file].file; }

  bool compare(const Expected& e, std::string& message, uint64_t& offset) {
    const ModelTensor* dst = out_.view.find(e.tensor->name);
    if (is_remap(e.planned->action)) return compare_remap(e, *dst, message, offset);
    const ModelTensor& src = in_.view.tensors[e.planned->input];
    if (e.planned->action == TensorAction::dequant_mxfp4) return compare_experts(e, src, *dst, message, offset);
    if (e.planned->action == TensorAction::dequant_mxfp4_blocks) return compare_blocks(e, src, *dst, message, offset);
    if (e.planned->action == TensorAction::regrid_scale) return compare_regrid(e, src, *dst, message, offset);
    return e.planned->action == TensorAction::copy ? compare_copy(src, *dst, message, offset)
                                                   : compare_dequant(e, src, *dst, message, offset);
  }

  // gpt-oss: each expert's BF16 [K, R] against a fresh exact dequantization of its blocks, transposed.
  bool compare_blocks(const Expected& e, const ModelTensor& src, const ModelTensor& dst, std::string& message,
                      uint64_t& offset) {
    const PlannedTensor& pt = *e.planned;
    const ModelTensor& scale = in_.view.tensors[pt.scale];
    const uint64_t rows = pt.rows, k = pt.k, per_expert = rows * k / 2, blocks = k / 32;
    std::vector<uint8_t> grid(scale.nbytes), in(per_expert), want(4 * per_expert), got(want.size()), scratch;
    IoError err;
    if (!in_file(scale).read_at(scale.offset, grid, err)) {
      message = "cannot read scale " + scale.name + ": " + err.message;
      return false;
    }
    for (uint64_t x = 0; x < std::max<uint64_t>(1, pt.experts); ++x) {
      if (!in_file(src).read_at(src.offset + x * per_expert, in, err) ||
          !out_file(dst).read_at(dst.offset + x * 4 * per_expert, got, err)) {
        message = "read failed: " + err.message;
        return false;
      }
      std::span<const uint8_t> scales;
      if ((x + 1) * rows * blocks <= grid.size())
        scales = std::span<const uint8_t>(grid).subspan(x * rows * blocks, rows * blocks);
      if (auto fault = dequant_mxfp4_transposed(in, scales, rows, k, x * rows, scratch, want)) {
        message = std::string("the input blocks cannot be converted (") + mxfp4_fault_name(fault->kind) +
                  " at element " + std::to_string(fault->element) + ")";
        return false;
      }
      if (std::memcmp(want.data(), got.data(), want.size()) != 0) {
        uint64_t i = 0;
        while (want[2 * i] == got[2 * i] && want[2 * i + 1] == got[2 * i + 1]) ++i;
        offset = dst.offset + x * 4 * per_expert + 2 * i;
        message = "BF16 expert " + std::to_string(x) + " differs from the exact MXFP4 dequantization (transposed) at " +
                  "element " + std::to_string(i) + " of its [" + std::to_string(k) + ", " + std::to_string(rows) +
                  "] matrix";
        return false;
      }
    }
    return true;
  }

  // A BF16 expert against a fresh exact MXFP4 dequantization of the input rows.
  bool compare_experts(const Expected& e, const ModelTensor& src, const ModelTensor& dst, std::string& message,
                       uint64_t& offset) {
    const ModelTensor& scale = in_.view.tensors[e.planned->scale];
    const uint64_t packed_cols = src.shape[1], k = 2 * packed_cols, blocks = k / 32;
    std::vector<uint8_t> grid(scale.nbytes);
    IoError err;
    if (!in_file(scale).read_at(scale.offset, grid, err)) {
      message = "cannot read scale " + scale.name + ": " + err.message;
      return false;
    }
    uint64_t rows_per_step = std::max<uint64_t>(1, kCompareStep / std::max<uint64_t>(1, packed_cols));
    std::vector<uint8_t> in(rows_per_step * packed_cols), want(in.size() * 4), got(want.size());
    for (uint64_t row = 0; row < src.shape[0]; row += rows_per_step) {
      uint64_t rows = std::min(rows_per_step, src.shape[0] - row), n = rows * packed_cols;
      if (!in_file(src).read_at(src.offset + row * packed_cols, std::span<uint8_t>(in.data(), n), err) ||
          !out_file(dst).read_at(dst.offset + row * k * 2, std::span<uint8_t>(got.data(), n * 4), err)) {
        message = "read failed: " + err.message;
        return false;
      }
      std::span<const uint8_t> scales;
      if ((row + rows) * blocks <= grid.size()) scales = std::span<const uint8_t>(grid).subspan(row * blocks, rows * blocks);
      auto fault = dequant_mxfp4_rows(std::span<const uint8_t>(in.data(), n), scales, k, row,
                                      std::span<uint8_t>(want.data(), n * 4));
      if (fault) {
        message = std::string("the input expert cannot be converted (") + mxfp4_fault_name(fault->kind) +
                  " at element " + std::to_string(fault->element) + ")";
        return false;
      }
      if (std::memcmp(want.data(), got.data(), n * 4) != 0) {
        uint64_t i = 0;
        while (want[2 * i] == got[2 * i] && want[2 * i + 1] == got[2 * i + 1]) ++i;
        uint16_t w = static_cast<uint16_t>(want[2 * i] | want[2 * i + 1] << 8);
        uint16_t o = static_cast<uint16_t>(got[2 * i] | got[2 * i + 1] << 8);
        uint64_t element = row * k + i;
        offset = dst.offset + element * 2;
        message = "BF16 expert differs from the exact MXFP4 dequantization at element " + std::to_string(element) +
                  " (row " + std::to_string(element / k) + ", column " + std::to_string(element % k) + "): output " +
                  hex16(o) + ", expected " + hex16(w);
        return false;
      }
    }
    return true;
  }

  // Recomputes each expert's slab of a fused INT8-shift tensor from the input experts.
  bool compare_remap(const Expected& e, const ModelTensor& dst, std::string& message, uint64_t& offset) {
    const FusedMatrix& m = plan_.fused[e.planned->fused];
    TensorAction action = e.planned->action;
    uint64_t slab = action == TensorAction::remap_mxfp4    ? remap_mxfp4_bytes(m.params)
                    : action == TensorAction::remap_shift2 ? remap_shift2_bytes(m.params)
                                                           : remap_channel_scale_bytes(m.params);
    std::vector<uint8_t> want(slab), got(slab);
    for (uint64_t expert = 0; expert < m.experts; ++expert) {
      std::vector<std::vector<uint8_t>> buffers;
      std::vector<RemapPart> parts;
      IoError err;
      for (const auto& [weight, scale] : m.parts[expert]) {
        const ModelTensor& w = in_.view.tensors[weight];
        const ModelTensor& s = in_.view.tensors[scale];
        buffers.emplace_back(w.nbytes);
        buffers.emplace_back(s.nbytes);
        if (!in_file(w).read_at(w.offset, buffers[buffers.size() - 2], err) ||
            !in_file(s).read_at(s.offset, buffers.back(), err)) {
          message = "read failed: " + err.message;
          return false;
        }
        parts.push_back(RemapPart{buffers[buffers.size() - 2], buffers.back(), w.shape[0]});
      }
      auto fault = action == TensorAction::remap_mxfp4    ? remap_expert_mxfp4(parts, m.params, want, nullptr)
                   : action == TensorAction::remap_shift2 ? remap_expert_shift2(parts, m.params, want)
                                                          : remap_expert_channel_scale(parts, m.params, want);
      if (fault) {
        message = "the input experts cannot be remapped (expert " + std::to_string(expert) + ")";
        return false;
      }
      if (!out_file(dst).read_at(dst.offset + expert * slab, got, err)) {
        message = "read failed: " + err.message;
        return false;
      }
      if (want != got) {
        uint64_t i = 0;
        while (want[i] == got[i]) ++i;
        offset = dst.offset + expert * slab + i;
        message = "expert " + std::to_string(expert) + " differs from the INT8-shift remap of the input at byte " +
                  std::to_string(i) + " of its slab: output " + std::to_string(got[i]) + ", expected " +
                  std::to_string(want[i]);
        return false;
      }
    }
    return true;
  }

  static bool read_grid(const LoadedModel& m, const ModelTensor& s, std::vector<uint8_t>& bytes, std::vector<float>& f32,
                        std::string& message) {
    bytes.resize(s.nbytes);
    IoError err;
    if (!m.checkpoint.shards[s.file].file.read_at(s.offset, bytes, err)) {
      message = "cannot read scale " + s.name + ": " + err.message;
      return false;
    }
    if (s.dtype && (*s.dtype == Dtype::F8_E8M0 || *s.dtype == Dtype::U8)) return true;
    if (!(s.dtype && scale_grid_to_f32(*s.dtype, bytes, f32))) {
      message = "scale " + s.name + " is " + s.type + ", not a block scale";
      return false;
    }
    return true;
  }

  // ckpt relayout: the re-gridded scale is the old one repeated (byte for byte), and its
  // weight dequantized with it on the new grid equals the input's dequantization on the old
  // one, every element (the exact dequantizer convert uses, numerics/fp8.h).
  bool compare_regrid(const Expected& e, const ModelTensor& src, const ModelTensor& dst, std::string& message,
                      uint64_t& offset) {
    const PlannedTensor& pt = *e.planned;
    const ModelTensor* w_in = fp8_weight_of_scale(in_.view, src.name);
    const ModelTensor* w_out = fp8_weight_of_scale(out_.view, dst.name);
    if (!w_in || !w_out || w_in->shape.size() != 2 || w_out->shape != w_in->shape) {
      message = "the FP8 weight of scale " + src.name + " is missing or of another shape in the output";
      return false;
    }
    std::vector<uint8_t> grid_in, grid_out;
    std::vector<float> f32_in, f32_out;
    if (!read_grid(in_, src, grid_in, f32_in, message) || !read_grid(out_, dst, grid_out, f32_out, message)) return false;
    const uint64_t elements = src.shape.size() == 2 ? src.shape[0] * src.shape[1] : 0;
    const Regrid r{Fp8Grid{pt.rows, pt.k, pt.block_rows, pt.block_cols}, plan_.regrid_rows, plan_.regrid_cols,
                   elements ? src.nbytes / elements : 0};
    std::vector<uint8_t> want(regrid_output_bytes(r));
    if (!regrid_scales(r, grid_in, want) || want != grid_out) {
      uint64_t i = 0;
      while (i < want.size() && i < grid_out.size() && want[i] == grid_out[i]) ++i;
      offset = dst.offset + i;
      message = "re-gridded scale differs from the input's block scale repeated at byte " + std::to_string(i);
      return false;
    }
    const Fp8Grid g_in{pt.rows, pt.k, pt.block_rows, pt.block_cols}, g_out{pt.rows, pt.k, plan_.regrid_rows, plan_.regrid_cols};
    const bool e8m0 = f32_in.empty();
    const uint64_t rows_per_step = std::max<uint64_t>(1, kCompareStep / std::max<uint64_t>(1, pt.k));
    std::vector<uint8_t> a(rows_per_step * pt.k), b(a.size()), va(2 * a.size()), vb(2 * a.size());
    for (uint64_t row = 0; row < pt.rows; row += rows_per_step) {
      const uint64_t n = std::min(rows_per_step, pt.rows - row) * pt.k;
      IoError err;
      if (!in_file(*w_in).read_at(w_in->offset + row * pt.k, std::span<uint8_t>(a.data(), n), err) ||
          !out_file(*w_out).read_at(w_out->offset + row * pt.k, std::span<uint8_t>(b.data(), n), err)) {
        message = "read failed: " + err.message;
        return false;
      }
      std::span<const uint8_t> ca(a.data(), n), cb(b.data(), n);
      std::span<uint8_t> oa(va.data(), 2 * n), ob(vb.data(), 2 * n);
      auto fa = e8m0 ? dequant_fp8_rows_e8m0(ca, row, g_in, grid_in, oa) : dequant_fp8_rows_f32(ca, row, g_in, f32_in, oa);
      auto fb = e8m0 ? dequant_fp8_rows_e8m0(cb, row, g_out, grid_out, ob) : dequant_fp8_rows_f32(cb, row, g_out, f32_out, ob);
      if (fa || fb) {
        if (fa && fb && fa->kind == fb->kind && fa->element == fb->element) continue;  // the same fault on both sides
        message = std::string("the output's ") + w_out->name + " dequantizes with a fault the input's does not have";
        return false;
      }
      if (std::memcmp(va.data(), vb.data(), 2 * n) != 0) {
        uint64_t i = 0;
        while (va[2 * i] == vb[2 * i] && va[2 * i + 1] == vb[2 * i + 1]) ++i;
        const uint64_t element = row * pt.k + i;
        offset = dst.offset;
        message = w_out->name + " dequantized on the new grid differs from the input's at element " +
                  std::to_string(element) + " (row " + std::to_string(element / pt.k) + ", column " +
                  std::to_string(element % pt.k) + ")";
        return false;
      }
    }
    return true;
  }

  bool compare_copy(const ModelTensor& src, const ModelTensor& dst, std::string& message, uint64_t& offset) {
    std::vector<uint8_t> a(kCompareStep), b(kCompareStep);
    for (uint64_t done = 0; done < src.nbytes;) {
      uint64_t n = std::min(kCompareStep, src.nbytes - done);
      IoError err;
      if (!in_file(src).read_at(src.offset + done, std::span<uint8_t>(a.data(), n), err) ||
          !out_file(dst).read_at(dst.offset + done, std::span<uint8_t>(b.data(), n), err)) {
        message = "read failed: " + err.message;
        offset = dst.offset + done;
        return false;
      }
      if (std::memcmp(a.data(), b.data(), n) != 0) {
        uint64_t i = 0;
        while (a[i] == b[i]) ++i;
        offset = dst.offset + done + i;
        message = "copied tensor differs from the input at byte " + std::to_string(done + i) + " of the tensor (" +
                  std::to_string(b[i]) + " vs input " + std::to_string(a[i]) + ")";
        return false;
      }
      done += n;
    }
    return true;
  }

  bool compare_dequant(const Expected& e, const ModelTensor& src, const ModelTensor& dst, std::string& message,
                       uint64_t& offset) {
    const ModelTensor& scale = in_.view.tensors[e.planned->scale];
    std::vector<uint8_t> grid(scale.nbytes);
    IoError err;
    if (!in_file(scale).read_at(scale.offset, grid, err)) {
      message = "cannot read scale " + scale.name + ": " + err.message;
      return false;
    }
    std::vector<float> grid_f32;
    if (e.planned->action == TensorAction::dequant_f32 && !(scale.dtype && scale_grid_to_f32(*scale.dtype, grid, grid_f32))) {
      message = "scale " + scale.name + " is " + scale.type + ", not an F32/BF16/F16 multiplier";
      return false;
    }
    const Fp8Grid g = planned_fp8_grid(plan_, *e.planned, src);
    uint64_t rows_per_step = std::max<uint64_t>(1, kCompareStep / std::max<uint64_t>(1, g.cols));
    std::vector<uint8_t> in(rows_per_step * g.cols), want(in.size() * 2), got(want.size());
    for (uint64_t row = 0; row < g.rows; row += rows_per_step) {
      uint64_t rows = std::min(rows_per_step, g.rows - row), n = rows * g.cols;
      if (!in_file(src).read_at(src.offset + row * g.cols, std::span<uint8_t>(in.data(), n), err) ||
          !out_file(dst).read_at(dst.offset + row * g.cols * 2, std::span<uint8_t>(got.data(), n * 2), err)) {
        message = "read failed: " + err.message;
        return false;
      }
      std::span<const uint8_t> weights(in.data(), n);
      std::span<uint8_t> expect(want.data(), n * 2);
      auto fault = e.planned->action == TensorAction::dequant_e8m0
                       ? dequant_fp8_rows_e8m0(weights, row, g, grid, expect)
                       : dequant_fp8_rows_f32(weights, row, g, grid_f32, expect);
      if (fault) {
        message = std::string("the input cannot be dequantized (") + fp8_fault_name(fault->kind) + ") at element " +
                  std::to_string(fault->element);
        return false;
      }
      if (std::memcmp(want.data(), got.data(), n * 2) != 0) {
        uint64_t i = 0;
        while (want[2 * i] == got[2 * i] && want[2 * i + 1] == got[2 * i + 1]) ++i;
        uint16_t w = static_cast<uint16_t>(want[2 * i] | want[2 * i + 1] << 8);
        uint16_t o = static_cast<uint16_t>(got[2 * i] | got[2 * i + 1] << 8);
        uint64_t element = row * g.cols + i;
        offset = dst.offset + element * 2;
        message = "converted BF16 differs from the exact dequantization at element " + std::to_string(element) +
                  " (row " + std::to_string(element / g.cols) + ", column " + std::to_string(element % g.cols) +
                  "): output " + hex16(o) + ", expected " + hex16(w);
        return false;
      }
    }
    return true;
  }

  const LoadedModel& in_;
  const ConversionPlan& plan_;
  const LoadedModel& out_;
  std::mutex mutex_;
};

// A signed conversion's bundle and provenance (convert --sign-key, sign/provenance.h):
// written by the conversion, checked by `ckpt verify-signature --provenance`, not here.
bool is_signed_conversion_file(const std::string& name) {
  return name == oms::kOutputBundleName || name == oms::kProvenanceName;
}

}  // namespace

void compare_model_files(const LoadedModel& in, const ConversionPlan& plan, const LoadedModel& out, Findings& f) {
  compare_config_members(in, plan, out, f);
  if (!out.checkpoint.is_directory) return;
  std::vector<ModelFile> files;
  Findings listing;
  list_model_files(out.checkpoint.root, files, listing);
  for (const auto& x : listing.items())
    if (x.severity == Severity::error) f.add(x);
  // What the conversion writes (convert/convert.cpp planned_files): the copied side files,
  // the shards, the index (by convert's rule, plan/output_index.h), config.json and a
  // rewritten params.json.
  std::set<std::string> copied(plan.side_files.begin(), plan.side_files.end());
  std::set<std::string> written;
  for (const auto& s : plan.shards) written.insert(s.name);
  if (plan_writes_index(in, plan)) written.insert(kIndexName);
  if (in.checkpoint.config) written.insert("config.json");
  if (plan.rewrites_params_json) written.insert("params.json");
  std::set<std::string> present;
  for (const auto& mf : files) {
    present.insert(mf.name);
    if (copied.count(mf.name))
      compare_side_file((fs::path(in.checkpoint.root) / mf.name).string(), mf.path, mf.name, f);
    else if (!written.count(mf.name) && !is_signed_conversion_file(mf.name))
      f.error("REF_EXTRA_FILE", mf.name, "", std::nullopt,
              mf.name + " is in the output, but the conversion of the input writes no such file");
  }
  for (const auto& name : copied)
    if (!present.count(name))
      f.error("REF_MISSING_FILE", name, "", std::nullopt,
              "the input has " + name + ", which the conversion copies, but the output has no such file");
  for (const char* name : {"config.json", "params.json"})
    if (written.count(name) && !present.count(name))
      f.error("REF_MISSING_FILE", name, "", std::nullopt,
              "the conversion of the input writes " + std::string(name) + " but the output has none");
}

// What conversion produced OUT: INT8-shift experts when fused tensors are present, with
// the headroom and rounding its config records (the production defaults otherwise).
ExpertMode detect_conversion_mode(const LoadedModel& out, RemapOptions& remap) {
  bool fused = false, bf16_experts = false;
  for (const auto& t : out.view.tensors) {
    if (t.name.ends_with(".ffn.experts.w13.mxfp4") || t.name.ends_with(".ffn.experts.w2.mxfp4")) fused = true;
    if (t.type == "BF16" && is_mxfp4_expert_name(t.name)) bf16_experts = true;
  }
  const JsonDoc* cfg = out.checkpoint.config.get();
  auto record = cfg ? json_get(cfg->root(), "ckptkit_conversion") : std::nullopt;
  // BF16 experts (--experts bf16): by their dtype, or by the record when the input has none.
  if (!fused && (bf16_experts || (record && json_string(*record, "experts") == "bf16"))) return ExpertMode::bf16;
  if (!fused) return ExpertMode::keep;
  auto format = record ? json_get(*record, "expert_format") : std::nullopt;
  if (format) {
    if (json_string(*format, "rounding") == "half-even") remap.rounding = RemapRounding::half_even;
    if (auto h = json_int(*format, "headroom_bits"); h && *h >= 0 && *h <= 3) remap.headroom = static_cast<unsigned>(*h);
  }
  return ExpertMode::int8_shift;
}

bool reference_plan(const LoadedModel& in, const LoadedModel& out, ConversionPlan& plan, Findings& f) {
  const JsonDoc* cfg = out.checkpoint.config.get();
  if (cfg && json_get(cfg->root(), "ckptkit_relayout")) {
    RelayoutRecord rec;
    std::string error;
    if (!read_relayout_record(cfg->root(), rec, error)) {
      f.error("REF_CONFIG", "config.json", "", std::nullopt, error);
      return false;
    }
    std::vector<std::string> fp8;
    for (const auto& t : in.view.tensors)
      if (t.type == "F8_E4M3" || t.type == "F8_E4M3FNUZ") fp8.push_back(t.name);
    return plan_regrid(in, RegridRequest{rec.block_n, rec.block_k, promoted_weights(rec, fp8)}, plan, f);
  }
  RemapOptions remap;
  const ExpertMode mode = detect_conversion_mode(out, remap);
  return plan_conversion(in, mode, remap, plan, f);
}

void check_against_reference(const LoadedModel& out, const std::string& reference_path, bool deep, Findings& f) {
  LoadedModel in;
  Findings in_findings;
  if (!load_model(reference_path, StReadOptions{}, in, in_findings) || in_findings.has_errors()) {
    for (auto x : in_findings.items())
      if (x.severity == Severity::error) f.add(x);
    f.error("REF_INPUT", reference_path, "", std::nullopt, "the reference input cannot be read cleanly");
    return;
  }
  ConversionPlan plan;
  Findings plan_findings;
  if (!reference_plan(in, out, plan, plan_findings)) {
    for (auto x : plan_findings.items())
      if (x.severity == Severity::error) f.add(x);
    f.error("REF_INPUT", reference_path, "", std::nullopt, "the reference input cannot be converted");
    return;
  }
  std::vector<Expected> matched;
  compare_sets(in, plan, out, matched, f);
  compare_config(in, plan, out, f);
  compare_model_files(in, plan, out, f);
  uint64_t payload = 0;
  for (const auto& t : out.view.tensors) payload += t.nbytes;
  if (payload != plan.payload_out)
    f.error("REF_TOTALS", "", "", std::nullopt,
            "output payload is " + std::to_string(payload) + " bytes; the conversion gives " +
                std::to_string(plan.payload_out));
  if (deep) DeepCompare(in, plan, out).run(matched, f);
}

}  // namespace ckpt
