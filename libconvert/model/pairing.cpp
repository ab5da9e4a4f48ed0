#include "model/pairing.h"

#include <cctype>
#include <string_view>

#include "core/checked_math.h"

namespace ckpt {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string strip(std::string_view s, std::string_view suffix) {
  return std::string(s.substr(0, s.size() - suffix.size()));
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

namespace {

class PairingCheck {
 public:
  PairingCheck(const ModelView& view, const PairingOptions& o, Findings& f, std::vector<Fp8Pair>* pairs)
      : view_(view), o_(o), f_(f), pairs_(pairs), claimed_(view.tensors.size(), false) {}

  void run() {
    for (const auto& t : view_.tensors) {
      if (t.type == "F8_E4M3") {
        check_fp8(t);
      } else if (t.type == "I8" && is_mxfp4_expert_name(t.name)) {
        check_expert(t);
      }
    }
    for (size_t i = 0; i < view_.tensors.size(); ++i)
      if (!claimed_[i]) check_stray(view_.tensors[i]);
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

  void check_fp8(const ModelTensor& t) {
    // NVFP4 group scales ("X.weight_scale", F8_E4M3) are scales, not weights.
    if (ends_with(t.name, ".weight_scale")) return;
    const ModelTensor* scale = nullptr;
    if (ends_with(t.name, ".weight")) {
      scale = sibling(t.name, ".weight", ".scale");
      if (!scale) scale = sibling(t.name, ".weight", ".weight_scale_inv");
    } else if (o_.allow_bare_fp8_names) {
      scale = sibling(t.name, "", ".scale");
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
    bool f32_scale = ends_with(scale->name, "_scale_inv");
    bool dtype_ok = check_scale_dtype(*scale, f32_scale ? "F32" : "F8_E8M0");
    bool grid_ok = is_2d && check_grid(t, *scale);
    if (pairs_ && dtype_ok && grid_ok) pairs_->push_back(Fp8Pair{index_of(t), index_of(*scale), f32_scale});
  }

  std::string scale_candidates(const ModelTensor& t) const {
    if (ends_with(t.name, ".weight")) {
      std::string base = strip(t.name, ".weight");
      return base + ".scale and " + base + ".weight_scale_inv";
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
  bool check_grid(const ModelTensor& w, const ModelTensor& scale) {
    std::vector<uint64_t> want{ceil_div(w.shape[0], o_.block_rows), ceil_div(w.shape[1], o_.block_cols)};
    if (scale.shape == want) return true;
    f_.error("SCALE_GRID_MISMATCH", file(scale), scale.name, scale.offset,
               "scale shape is " + shape_to_string(scale.shape) + ", required " + shape_to_string(want) +
                   " for weight " + w.name + " " + shape_to_string(w.shape) + " with " +
                   std::to_string(o_.block_rows) + "x" + std::to_string(o_.block_cols) + " blocks");
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

  // A ".scale" nobody claimed is stray when it is an E8M0 scale or sits beside a weight
  // of the same base name (QW writes such leftovers as BF16); a "_scale_inv" always is.
  // Other ".scale" tensors (a norm's scale in another architecture) are not our business.
  void check_stray(const ModelTensor& t) {
    bool is_scale_inv = ends_with(t.name, ".weight_scale_inv");
    if (!is_scale_inv && !ends_with(t.name, ".scale")) return;
    std::string base = is_scale_inv ? strip(t.name, "_scale_inv") : strip(t.name, ".scale");
    const ModelTensor* owner = is_scale_inv ? view_.find(base) : view_.find(base + ".weight");
    if (!owner && !is_scale_inv) owner = view_.find(base);
    if (!is_scale_inv && t.type != "F8_E8M0" && !owner) return;
    std::string why = owner ? "its base " + owner->name + " is " + owner->type + ", not a weight that takes a scale"
                            : "no weight named " + (is_scale_inv ? base : base + ".weight") + " exists";
    f_.error("SCALE_STRAY", file(t), t.name, t.offset,
             t.type + " scale " + shape_to_string(t.shape) + " belongs to no FP8/MXFP4 weight: " + why);
  }

  const ModelView& view_;
  const PairingOptions& o_;
  Findings& f_;
  std::vector<Fp8Pair>* pairs_;
  std::vector<bool> claimed_;
  std::string key_;
};

}  // namespace

void check_fp8_pairing(const ModelView& view, const PairingOptions& o, Findings& f, std::vector<Fp8Pair>* pairs) {
  if (o.block_rows == 0 || o.block_cols == 0) {
    f.error("SCALE_GRID_MISMATCH", "", "", std::nullopt,
            "block size " + std::to_string(o.block_rows) + "x" + std::to_string(o.block_cols) +
                " is invalid; required positive weight_block_size");
    return;
  }
  PairingCheck(view, o, f, pairs).run();
}

}  // namespace ckpt
