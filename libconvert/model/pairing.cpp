#include "model/pairing.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include "core/checked_math.h"
#include "numerics/ggml_dequant.h"

namespace ckpt {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string strip(std::string_view s, std::string_view suffix) {
  return std::string(s.substr(0, s.size() - suffix.size()));
}

bool is_one_byte_non_fp8(Dtype d) { return d == Dtype::I8 || d == Dtype::U8 || d == Dtype::BOOL; }

std::string dtype_list(const std::vector<Dtype>& ds) {
  std::string s;
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? " or " : "") + std::string(dtype_name(ds[i]));
  return s;
}

}  // namespace

// "<block>.ffn.experts.<N>.w1.weight" (also w2, w3): the routed-expert naming of §3.
bool is_mxfp4_expert_name(std::string_view name) {
  if (!ends_with(name, ".weight")) return false;
  name.remove_suffix(7);
  if (name.size() < 3 || name[name.size() - 3] != '.' || name[name.size() - 2] != 'w') return false;
  char w = name.back();
  if (w != '1' && w != '2' && w != '3') return false;
  name.remove_suffix(3);
  size_t digits = 0;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[name.size() - 1 - digits]))) ++digits;
  if (digits == 0) return false;
  name.remove_suffix(digits);
  return ends_with(name, ".ffn.experts.");
}

bool scale_grid_to_f32(Dtype dtype, std::span<const uint8_t> bytes, std::vector<float>& out) {
  switch (dtype) {
    case Dtype::F32:
      out.resize(bytes.size() / 4);
      if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
      return true;
    case Dtype::BF16:
    case Dtype::F16:
      out.resize(bytes.size() / 2);
      for (size_t i = 0; i < out.size(); ++i) {
        const uint16_t h = static_cast<uint16_t>(bytes[2 * i] | bytes[2 * i + 1] << 8);
        out[i] = dtype == Dtype::BF16 ? ggml_bf16_to_f32(h) : ggml_fp16_to_f32(h);  // exact widening
      }
      return true;
    default: return false;
  }
}

namespace {

class PairingCheck {
 public:
  PairingCheck(const ModelView& view, const PairingOptions& o, Findings& f, std::vector<Fp8Pair>* pairs,
               std::vector<Mxfp4BlocksPair>* blocks)
      : view_(view), o_(o), s_(o.scheme), f_(f), pairs_(pairs), blocks_(blocks), claimed_(view.tensors.size(), false) {}

  void run() {
    const bool mx_blocks = s_.shape == ScaleShape::mxfp4_blocks;
    for (const auto& t : view_.tensors) {
      if (t.type == "F8_E4M3") {
        check_fp8(t);
      } else if (t.type == "I8" && is_mxfp4_expert_name(t.name)) {
        check_expert(t);
      } else if (mx_blocks && ends_with(t.name, s_.weight_suffix)) {
        check_blocks(t);
      } else if (!s_.profile.empty() && !mx_blocks && t.dtype && is_one_byte_non_fp8(*t.dtype)) {
        check_non_fp8_weight(t);
      }
    }
    for (size_t i = 0; i < view_.tensors.size(); ++i)
      if (!claimed_[i]) check_stray(view_.tensors[i]);
  }

  void check_fp8(const ModelTensor& t) {
    // NVFP4 group scales ("X.weight_scale", F8_E4M3) are scales, not weights.
    if (ends_with(t.name, ".weight_scale")) return;
    const ModelTensor* scale = nullptr;
    std::string base;
    const ScaleRule* first_rule = nullptr;
    if (ends_with(t.name, s_.weight_suffix)) {
      base = strip(t.name, s_.weight_suffix);
      for (const auto& r : s_.scales)
        if ((scale = view_.find(base + r.suffix))) {
          first_rule = &r;
          break;
        }
    } else if (o_.allow_bare_fp8_names) {
      base = t.name;
      scale = sibling(t.name, "", ".scale");
      if (scale)
        for (const auto& r : s_.scales)
          if (r.suffix == ".scale") first_rule = &r;
    } else {
      report_bare_unpaired(t);
      return;
    }
    bool is_2d = t.shape.size() == 2;
    if (!is_2d)
      f_.error("FP8_NOT_2D", file(t), t.name, t.offset,
               "FP8 weight has shape " + shape_to_string(t.shape) + "; block scaling requires 2 dimensions");
    if (!scale) {
      f_.error("FP8_UNPAIRED", file(t), t.name, t.offset,
               "F8_E4M3 tensor " + shape_to_string(t.shape) + " has no scale (looked for " + scale_candidates(t) +
                   " in every shard); an unscaled cast would be wrong by a power of two");
      return;
    }
    claim(t, *scale);
    // The config says this module is not quantized, the tensors say it is: which one is
    // wrong is not for us to guess.
    if (!base.empty() && module_excluded(s_, base))
      f_.error("QUANT_EXCLUDED_MODULE", file(t), t.name, t.offset,
               "F8_E4M3 weight with scale " + scale->name + " in a module that " + s_.exclusion_source +
                   " lists as not quantized; the config and the tensors disagree");
    Fp8Pair pair;
    pair.weight = index_of(t);
    pair.scale = index_of(*scale);
    for (const auto& suffix : s_.dropped)
      if (const ModelTensor* d = view_.find(base + suffix)) {
        claimed_[index_of(*d)] = true;
        pair.dropped.push_back(index_of(*d));
      }
    const ScaleRule* rule = pick_rule(*scale, first_rule);
    bool dtype_ok = rule != nullptr;
    if (rule && rule->meaning == ScaleMeaning::e8m0 && scale->dtype == Dtype::U8 && !s_.e8m0_declared) {
      f_.error("SCALE_DTYPE", file(*scale), scale->name, scale->offset,
               "scale is U8 but the config does not declare E8M0 scales (quantization_config.scale_fmt is not "
               "\"ue8m0\"): read as linear multipliers these bytes would give weights about 450,000x too large; "
               "refusing to guess");
      dtype_ok = false;
    }
    bool grid_ok = is_2d && check_grid(t, *scale, pair);
    if (pairs_ && dtype_ok && grid_ok) {
      pair.scale_dtype = *scale->dtype;
      pair.f32_scale = rule->meaning == ScaleMeaning::multiplier;
      pairs_->push_back(std::move(pair));
    }
  }

 private:
  // Looks up `base` minus `strip_suffix` plus `add_suffix` without allocating per call
  // (this runs for every expert tensor: 35,328 times on 0731).
  const ModelTensor* sibling(std::string_view name, std::string_view strip_suffix, std::string_view add_suffix) {
    key_.assign(name.substr(0, name.size() - strip_suffix.size()));
    key_ += add_suffix;
    return view_.find(key_);
  }

  size_t index_of(const ModelTensor& t) const { return static_cast<size_t>(&t - view_.tensors.data()); }
  const std::string& file(const ModelTensor& t) const { return view_.file_of(t); }

  // Marks the scale as owned and reports when it lives in another shard (§7.4: resolved
  // through weight_map; QW's same-shard-only lookup silently drops such scales).
  void claim(const ModelTensor& weight, const ModelTensor& scale) {
    claimed_[index_of(scale)] = true;
    if (weight.file != scale.file)
      f_.warning("SCALE_CROSS_SHARD", file(weight), weight.name, weight.offset,
                 "scale " + scale.name + " is in " + file(scale) + ", not beside its weight in " + file(weight) +
                     "; paired through the index");
  }

  // The rule for the found scale's suffix and dtype; SCALE_DTYPE (naming what is accepted) when none.
  const ScaleRule* pick_rule(const ModelTensor& scale, const ScaleRule* first) {
    std::vector<Dtype> accepted;
    if (first)
      for (const auto& r : s_.scales) {
        if (r.suffix != first->suffix) continue;
        if (scale.dtype && std::find(r.dtypes.begin(), r.dtypes.end(), *scale.dtype) != r.dtypes.end()) return &r;
        for (Dtype d : r.dtypes)
          if (d != Dtype::U8 || s_.e8m0_declared || r.meaning != ScaleMeaning::e8m0) accepted.push_back(d);
      }
    f_.error("SCALE_DTYPE", file(scale), scale.name, scale.offset,
             "scale dtype is " + scale.type + ", required " + dtype_list(accepted));
    return nullptr;
  }

  std::string scale_candidates(const ModelTensor& t) const {
    if (ends_with(t.name, s_.weight_suffix)) {
      std::string base = strip(t.name, s_.weight_suffix), out;
      std::vector<std::string> seen;
      for (const auto& r : s_.scales)
        if (std::find(seen.begin(), seen.end(), r.suffix) == seen.end()) seen.push_back(r.suffix);
      for (size_t i = 0; i < seen.size(); ++i)
        out += (i == 0 ? "" : i + 1 == seen.size() ? " and " : ", ") + base + seen[i];
      return out;
    }
    return t.name + ".scale";
  }

  // Without the bare-name rule P has no scale by definition; its sibling P.scale, if any,
  // is named in this one finding rather than reported again as a stray scale.
  void report_bare_unpaired(const ModelTensor& t) {
    std::string msg = "F8_E4M3 tensor " + shape_to_string(t.shape) +
                      " has no .weight suffix and bare FP8 names are not paired under this profile";
    if (const ModelTensor* sib = view_.find(t.name + ".scale")) {
      claimed_[index_of(*sib)] = true;
      msg += "; its sibling " + sib->name + " (" + sib->type + " " + shape_to_string(sib->shape) + ", " +
             file(*sib) + ") is left unused";
    }
    f_.error("FP8_UNPAIRED", file(t), t.name, t.offset, msg);
  }

  bool check_scale_dtype(const ModelTensor& scale, const std::string& want) {
    if (scale.type == want) return true;
    f_.error("SCALE_DTYPE", file(scale), scale.name, scale.offset,
             "scale dtype is " + scale.type + ", required " + want);
    return false;
  }

  // §7.4: exactly [ceil(M/bm), ceil(N/bn)]; a partial last block shares its block's scale.
  // Per channel [M, 1] (or [M]), per tensor [] (or [1]), 4-D [ceil(M/bm), 1, ceil(N/bn), 1].
  bool check_grid(const ModelTensor& w, const ModelTensor& scale, Fp8Pair& pair) {
    const uint64_t m = w.shape[0], n = w.shape[1];
    std::vector<std::vector<uint64_t>> want;
    std::string rule;
    switch (s_.shape) {
      case ScaleShape::channel:
        pair.block_rows = 1;
        pair.block_cols = std::max<uint64_t>(1, n);
        want = {{m, 1}, {m}};
        rule = "one scale per output row";
        break;
      case ScaleShape::tensor:
        pair.block_rows = std::max<uint64_t>(1, m);
        pair.block_cols = std::max<uint64_t>(1, n);
        want = {{}, {1}, {1, 1}};
        rule = "one scale for the whole tensor";
        break;
      case ScaleShape::block4d:
        pair.block_rows = o_.block_rows;
        pair.block_cols = o_.block_cols;
        want = {{ceil_div(m, o_.block_rows), 1, ceil_div(n, o_.block_cols), 1}};
        rule = std::to_string(o_.block_rows) + "x" + std::to_string(o_.block_cols) + " blocks (4-D scale)";
        break;
      default:
        pair.block_rows = o_.block_rows;
        pair.block_cols = o_.block_cols;
        want = {{ceil_div(m, o_.block_rows), ceil_div(n, o_.block_cols)}};
        rule = std::to_string(o_.block_rows) + "x" + std::to_string(o_.block_cols) + " blocks";
        break;
    }
    for (const auto& s : want)
      if (scale.shape == s) return true;
    f_.error("SCALE_GRID_MISMATCH", file(scale), scale.name, scale.offset,
             "scale shape is " + shape_to_string(scale.shape) + ", required " + shape_to_string(want[0]) +
                 " for weight " + w.name + " " + shape_to_string(w.shape) + " with " + rule);
    return false;
  }

  // MXFP4 expert: I8 [o, i/2] (two E2M1 codes a byte) with E8M0 [o, i/32].
  void check_expert(const ModelTensor& t) {
    const ModelTensor* scale = sibling(t.name, ".weight", ".scale");
    if (!scale) {
      f_.error("MXFP4_SCALE_MISSING", file(t), t.name, t.offset,
               "MXFP4 expert weight " + shape_to_string(t.shape) + " has no " + strip(t.name, ".weight") +
                   ".scale in any shard");
      return;
    }
    claim(t, *scale);
    check_scale_dtype(*scale, "F8_E8M0");
    if (t.shape.size() != 2) {
      f_.error("MXFP4_SCALE_SHAPE", file(t), t.name, t.offset,
               "MXFP4 expert weight has shape " + shape_to_string(t.shape) + ", required 2 dimensions");
      return;
    }
    auto elements = checked_mul(t.shape[1], 2);
    if (!elements || *elements % 32 != 0) {
      f_.error("MXFP4_SCALE_SHAPE", file(t), t.name, t.offset,
               "packed row of " + std::to_string(t.shape[1]) +
                   " bytes does not hold a whole number of 32-element groups");
      return;
    }
    std::vector<uint64_t> want{t.shape[0], *elements / 32};
    if (scale->shape != want)
      f_.error("MXFP4_SCALE_SHAPE", file(*scale), scale->name, scale->offset,
               "scale shape is " + shape_to_string(scale->shape) + ", required " + shape_to_string(want) +
                   " for expert weight " + shape_to_string(t.shape) + " (one E8M0 per 32 elements)");
  }

  // gpt-oss: X_blocks U8 [E, R, K/32, 16] (or [R, K/32, 16]) with X_scales U8/E8M0 [E, R, K/32].
  void check_blocks(const ModelTensor& t) {
    claimed_[index_of(t)] = true;  // the profile's own weight, whatever its findings below
    const std::string base = strip(t.name, s_.weight_suffix);
    const std::string scale_suffix = s_.scales.empty() ? "_scales" : s_.scales[0].suffix;
    const ModelTensor* scale = view_.find(base + scale_suffix);
    if (t.dtype != Dtype::U8) {
      f_.error("QUANT_WEIGHT_DTYPE", file(t), t.name, t.offset,
               "MXFP4 blocks tensor is " + t.type + ", required U8 (two E2M1 codes a byte)");
      if (scale) claimed_[index_of(*scale)] = true;
      return;
    }
    if (!scale) {
      f_.error("MXFP4_SCALE_MISSING", file(t), t.name, t.offset,
               "MXFP4 blocks " + shape_to_string(t.shape) + " have no " + base + scale_suffix + " in any shard");
      return;
    }
    claim(t, *scale);
    if (!s_.scales.empty()) (void)pick_rule(*scale, &s_.scales[0]);  // SCALE_DTYPE when neither U8 nor E8M0
    const auto& sh = t.shape;
    if ((sh.size() != 4 && sh.size() != 3) || sh.back() != 16) {
      f_.error("MXFP4_SCALE_SHAPE", file(t), t.name, t.offset,
               "MXFP4 blocks have shape " + shape_to_string(sh) + ", required [E, R, K/32, 16]");
      return;
    }
    if (std::find(sh.begin(), sh.end(), uint64_t{0}) != sh.end()) {
      // [100000000, 0, 1, 16] is 0 bytes that claim 1e8 experts: no layer has an empty
      // dimension, and counts taken from such a header must never size any work.
      f_.error("MXFP4_SCALE_SHAPE", file(t), t.name, t.offset,
               "MXFP4 blocks have shape " + shape_to_string(sh) +
                   ": a dimension of 0 holds no weight; refusing a quantized tensor with an empty dimension");
      return;
    }
    std::vector<uint64_t> want(sh.begin(), sh.end() - 1);
    if (scale->shape != want) {
      f_.error("MXFP4_SCALE_SHAPE", file(*scale), scale->name, scale->offset,
               "scale shape is " + shape_to_string(scale->shape) + ", required " + shape_to_string(want) +
                   " for blocks " + t.name + " " + shape_to_string(sh) + " (one E8M0 per 32 elements)");
      return;
    }
    if (blocks_ && scale->dtype && (*scale->dtype == Dtype::U8 || *scale->dtype == Dtype::F8_E8M0)) {
      Mxfp4BlocksPair p;
      p.blocks = index_of(t);
      p.scales = index_of(*scale);
      p.experts = sh.size() == 4 ? sh[0] : 1;
      p.rows = sh[sh.size() - 3];
      p.k = sh[sh.size() - 2] * 32;
      blocks_->push_back(p);
    }
  }

  // A 1-byte tensor that is not FP8 (I8, U8, BOOL) with a scale beside it: never dequantized.
  void check_non_fp8_weight(const ModelTensor& t) {
    if (!ends_with(t.name, s_.weight_suffix)) return;
    const std::string base = strip(t.name, s_.weight_suffix);
    for (const auto& r : s_.scales)
      if (const ModelTensor* scale = view_.find(base + r.suffix)) {
        claimed_[index_of(*scale)] = true;
        f_.error("QUANT_WEIGHT_DTYPE", file(t), t.name, t.offset,
                 t.type + " tensor " + shape_to_string(t.shape) + " has a scale " + scale->name +
                     " but is not F8_E4M3; quantization profile " + s_.profile +
                     " dequantizes only F8_E4M3 weights (refusing to read an integer as FP8)");
        return;
      }
  }

  // A ".scale" nobody claimed is stray when it is an E8M0 scale or sits beside a weight
  // of the same base name (QW writes such leftovers as BF16); a "_scale_inv" always is.
  // Other ".scale" tensors (a norm's scale in another architecture) are not our business.
  // Under a profile, every unclaimed tensor with one of its scale or dropped suffixes is.
  void check_stray(const ModelTensor& t) {
    bool is_scale_inv = ends_with(t.name, ".weight_scale_inv");
    if (!is_scale_inv && !ends_with(t.name, ".scale")) {
      if (!check_profile_stray(t)) check_unknown_layout(t);
      return;
    }
    std::string base = is_scale_inv ? strip(t.name, "_scale_inv") : strip(t.name, ".scale");
    const ModelTensor* owner = is_scale_inv ? view_.find(base) : view_.find(base + ".weight");
    if (!owner && !is_scale_inv) owner = view_.find(base);
    if (!is_scale_inv && t.type != "F8_E8M0" && !owner) return;
    std::string why = owner ? "its base " + owner->name + " is " + owner->type + ", not a weight that takes a scale"
                            : "no weight named " + (is_scale_inv ? base : base + ".weight") + " exists";
    f_.error("SCALE_STRAY", file(t), t.name, t.offset,
             t.type + " scale " + shape_to_string(t.shape) + " belongs to no FP8/MXFP4 weight: " + why);
  }

  // A tensor no rule claimed whose name says it is quantization data (a scale, a zero point,
  // packed codes) of a layout the detected profile does not describe: an NVFP4 checkpoint
  // without its config (U8 weights, F8_E4M3 weight_scale, F32 weight_scale_2), an asymmetric
  // scheme's weight_zero_point. Copied as a plain tensor it would leave its weight wrong or
  // undecodable, so it is refused, never guessed at.
  void check_unknown_layout(const ModelTensor& t) {
    static constexpr std::string_view kQuantData[] = {
        ".weight_scale",  ".weight_scale_2",    ".weight_zero_point", ".weight_global_scale", ".weight_packed",
        ".weight_shape",  ".weight_g_idx",      ".input_scale",       ".input_zero_point",    ".input_global_scale",
        ".activation_scale", ".qscale_weight",  ".qscale_act",        ".qweight",             ".qzeros",
        ".scales",        ".g_idx",             "_blocks",            "_scales"};
    for (std::string_view suffix : kQuantData) {
      if (!ends_with(t.name, suffix)) continue;
      const std::string profile = s_.profile.empty() ? std::string("no quantization profile applies (") +
                                                           s_.config_file + " describes no quantization)"
                                                     : "quantization profile " + s_.profile + " has no such tensor";
      f_.error("QUANT_LAYOUT_UNKNOWN", file(t), t.name, t.offset,
               t.type + " tensor " + shape_to_string(t.shape) + " is quantization data (" + std::string(suffix) +
                   ") of a layout " + profile + "; refusing to copy it as a plain tensor or to guess its arithmetic");
      return;
    }
  }

  // True when `t` was reported as a stray scale of the profile.
  bool check_profile_stray(const ModelTensor& t) {
    if (s_.profile.empty()) return false;
    std::vector<std::string> suffixes = s_.dropped;
    for (const auto& r : s_.scales) suffixes.push_back(r.suffix);
    for (const auto& suffix : suffixes) {
      if (suffix == ".scale" || !ends_with(t.name, suffix)) continue;
      const std::string weight = strip(t.name, suffix) + s_.weight_suffix;
      const ModelTensor* owner = view_.find(weight);
      std::string why = owner ? "its weight " + owner->name + " is " + owner->type + ", not a quantized weight"
                              : "no weight named " + weight + " exists";
      f_.error("SCALE_STRAY", file(t), t.name, t.offset,
               t.type + " scale " + shape_to_string(t.shape) + " belongs to no quantized weight (profile " +
                   s_.profile + "): " + why);
      return true;
    }
    return false;
  }

  const ModelView& view_;
  const PairingOptions& o_;
  const QuantScheme& s_;
  Findings& f_;
  std::vector<Fp8Pair>* pairs_;
  std::vector<Mxfp4BlocksPair>* blocks_;
  std::vector<bool> claimed_;
  std::string key_;
};

}  // namespace

void check_fp8_pairing(const ModelView& view, const PairingOptions& o, Findings& f, std::vector<Fp8Pair>* pairs,
                       std::vector<Mxfp4BlocksPair>* blocks) {
  if (o.block_rows == 0 || o.block_cols == 0) {
    f.error("SCALE_GRID_MISMATCH", "", "", std::nullopt,
            "block size " + std::to_string(o.block_rows) + "x" + std::to_string(o.block_cols) +
                " is invalid; required positive weight_block_size");
    return;
  }
  PairingCheck(view, o, f, pairs, blocks).run();
}

std::optional<Fp8Pair> pair_fp8_weight(const ModelView& view, const PairingOptions& o, const ModelTensor& weight,
                                       std::string& problem, std::string* code) {
  Findings f;
  std::vector<Fp8Pair> pairs;
  PairingCheck check(view, o, f, &pairs, nullptr);
  check.check_fp8(weight);
  for (const auto& x : f.items())
    if (x.severity == Severity::error) {
      problem = x.message;
      if (code) *code = x.code;
      return std::nullopt;
    }
  if (pairs.empty()) {
    problem = "no usable scale";
    return std::nullopt;
  }
  return pairs.front();
}

}  // namespace ckpt
