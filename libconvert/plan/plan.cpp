#include "plan/plan.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <filesystem>
#include <unordered_map>

#include "core/checked_math.h"
#include "formats/model_files.h"
#include "profiles/registry.h"
#include "model/structure_hash.h"
#include "sign/provenance.h"

namespace ckpt {
namespace fs = std::filesystem;

namespace {

// Modules whose weights must stay BF16 for DSpark / legacy MTP (deepseek-v4.md §9):
// listed in ignored_layers when the checkpoint has them.
const char* const kProjectionModules[] = {"main_proj", "e_proj", "h_proj"};

bool has_module(const ModelView& view, const std::string& module) {
  std::string needle = "." + module + ".";
  for (const auto& t : view.tensors)
    if (t.name.find(needle) != std::string::npos) return true;
  return false;
}

// Every non-tensor file to carry over: relative paths, hidden entries skipped, the
// shards, the index and config.json (rewritten) excluded. The listing is
// list_model_files's (formats/model_files.h): a symlink leading outside the checkpoint
// (a secret linked in) or a FIFO is an error and is never copied.
bool list_side_files(const Checkpoint& ck, ConversionPlan& plan, Findings& findings) {
  if (!ck.is_directory) return true;
  std::vector<ModelFile> files;
  const bool ok = list_model_files(ck.root, files, findings);
  const auto& quant_only = plan.pairing.scheme.quant_only_files;
  // Every FP8 weight is dequantized (convert never writes FP8 under a quantization profile):
  // a file describing only that quantization would tell loaders to expect FP8 that is gone.
  const bool dequantized = !plan.output_has_fp8 && !plan.quant_profile.empty();
  plan.rewrites_params_json = dequantized && plan.pairing.scheme.config_file == "params.json";
  for (const auto& mf : files) {
    const std::string& rel = mf.name;
    if (rel == kIndexName || rel == "config.json" || rel.ends_with(".safetensors")) continue;
    if (rel == "params.json" && plan.rewrites_params_json) continue;  // rewritten by convert
    // IN's OMS bundle and provenance sign IN's bytes: copied into OUT they would claim to
    // sign the output (convert --sign-key writes OUT's own, sign/provenance.h).
    if (rel == oms::kOutputBundleName || rel == oms::kProvenanceName) {
      findings.info("CONVERT_SIGNATURE_NOT_COPIED", rel, "", std::nullopt,
                    rel + " signs the input's bytes, not the output's: not copied (--sign-key signs the output)");
      continue;
    }
    if (dequantized && std::find(quant_only.begin(), quant_only.end(), rel) != quant_only.end()) {
      plan.dropped_side_files.push_back(rel);
      continue;
    }
    plan.side_files.push_back(rel);
    plan.side_bytes += mf.size;
  }
  std::sort(plan.side_files.begin(), plan.side_files.end());
  return ok;
}

std::string structure_hash_of(const ModelView& view) {
  std::vector<StructureRecord> records;
  records.reserve(view.tensors.size());
  for (const auto& t : view.tensors) records.push_back(StructureRecord{t.name, t.type, t.shape, t.nbytes});
  return structure_sha256(std::move(records));
}

// "<block>.ffn.experts.<e>.w<1|2|3>.weight" split into its parts.
struct ExpertName {
  std::string block;
  uint64_t expert = 0;
  char matrix = '1';
};

std::optional<ExpertName> parse_expert_name(const std::string& name) {
  if (!is_mxfp4_expert_name(name)) return std::nullopt;
  static const std::string marker = ".ffn.experts.";
  size_t at = name.rfind(marker);
  size_t id_begin = at + marker.size(), id_end = name.find('.', id_begin);
  std::string digits = name.substr(id_begin, id_end - id_begin);
  if (digits.size() > 9) return std::nullopt;
  return ExpertName{name.substr(0, at), std::stoull(digits), name[id_end + 2]};
}


// Groups a block's per-expert MXFP4 tensors into its two fused matrices. Every expert
// 0..E-1 must have w1, w2, w3 with consistent shapes and K a multiple of 32.
bool fuse_block(const ModelView& view, const std::string& block, const std::map<uint64_t, std::array<size_t, 3>>& by_expert,
                const RemapOptions& remap, std::vector<FusedMatrix>& out, Findings& f) {
  auto bad = [&](const std::string& msg) {
    f.error("REMAP_EXPERTS", "", block + ".ffn.experts", std::nullopt, msg);
    return false;
  };
  uint64_t experts = by_expert.size();
  if (by_expert.rbegin()->first != experts - 1)
    return bad("block " + block + " numbers its experts up to " + std::to_string(by_expert.rbegin()->first) +
               " but has only " + std::to_string(experts) + "; experts must be 0..E-1");
  const ModelTensor& w1 = view.tensors[by_expert.begin()->second[0]];
  const ModelTensor& w2 = view.tensors[by_expert.begin()->second[1]];
  std::vector<uint64_t> want13 = w1.shape, want2 = w2.shape;
  if (want13.size() != 2 || want2.size() != 2 || want13[1] * 2 % 32 != 0 || want2[1] * 2 % 32 != 0)
    return bad("expert weights " + shape_to_string(want13, "x", false) + " / " + shape_to_string(want2, "x", false) +
               " do not hold whole 32-element groups per row (K must be a multiple of 32)");
  FusedMatrix w13{block, "w13", experts, RemapParams{2 * want13[0], want13[1] * 2, remap.headroom, remap.rounding}, {}};
  FusedMatrix down{block, "w2", experts, RemapParams{want2[0], want2[1] * 2, remap.headroom, remap.rounding}, {}};
  for (const auto& [e, idx] : by_expert) {
    for (int m = 0; m < 3; ++m) {
      if (idx[m] == SIZE_MAX)
        return bad("expert " + std::to_string(e) + " of " + block + " has no w" + std::to_string(m + 1) + " weight");
      const auto& want = m == 1 ? want2 : want13;
      if (view.tensors[idx[m]].shape != want)
        return bad(view.tensors[idx[m]].name + " is " + shape_to_string(view.tensors[idx[m]].shape, "x", false) + ", expected " +
                   shape_to_string(want, "x", false) + " like expert 0");
    }
    auto scale_of = [&](size_t w) { return view.by_name.at(view.tensors[w].name.substr(0, view.tensors[w].name.size() - 7) + ".scale"); };
    w13.parts.push_back({{idx[0], scale_of(idx[0])}, {idx[2], scale_of(idx[2])}});
    down.parts.push_back({{idx[1], scale_of(idx[1])}});
  }
  out.push_back(std::move(w13));
  out.push_back(std::move(down));
  return true;
}

// INT8-shift mode: every block with routed experts becomes two fused matrices.
bool plan_fused(const ModelView& view, const RemapOptions& remap, std::vector<FusedMatrix>& fused, Findings& f) {
  std::map<std::string, std::map<uint64_t, std::array<size_t, 3>>> blocks;
  for (size_t i = 0; i < view.tensors.size(); ++i) {
    auto name = parse_expert_name(view.tensors[i].name);
    if (!name || view.tensors[i].type != "I8") continue;
    auto& slot = blocks[name->block].try_emplace(name->expert, std::array<size_t, 3>{SIZE_MAX, SIZE_MAX, SIZE_MAX})
                     .first->second;
    slot[static_cast<size_t>(name->matrix - '1')] = i;
  }
  for (const auto& [block, experts] : blocks)
    if (!fuse_block(view, block, experts, remap, fused, f)) return false;
  return true;
}

// Decides each input tensor's fate: converted (paired FP8 weight; with --experts bf16 also
// every MXFP4 expert weight), dropped (its scale) or copied (everything else, MXFP4 experts
// and their scales included in the other expert modes).
enum Dropped : uint8_t { kKept = 0, kConsumedScale = 1, kConsumedByRemap = 2 };

void classify(const ModelView& view, ExpertMode experts, const std::vector<Fp8Pair>& pairs,
              const std::vector<Mxfp4BlocksPair>& blocks, const std::vector<FusedMatrix>& fused,
              std::vector<PlannedTensor>& fate, std::vector<uint8_t>& dropped, ConversionPlan& plan,
              const RegridRequest* regrid = nullptr) {
  fate.assign(view.tensors.size(), PlannedTensor{});
  dropped.assign(view.tensors.size(), kKept);
  for (size_t i = 0; i < view.tensors.size(); ++i) fate[i].input = i;
  for (const auto& p : pairs) {
    if (regrid && !std::binary_search(regrid->promoted.begin(), regrid->promoted.end(), view.tensors[p.weight].name)) {
      // ckpt relayout: the FP8 bytes (and any activation scale) stay, the block scale is re-gridded.
      PlannedTensor& s = fate[p.scale];
      s.action = TensorAction::regrid_scale;
      s.block_rows = p.block_rows;
      s.block_cols = p.block_cols;
      s.rows = view.tensors[p.weight].shape[0];
      s.k = view.tensors[p.weight].shape[1];
      continue;
    }
    fate[p.weight].action = p.f32_scale ? TensorAction::dequant_f32 : TensorAction::dequant_e8m0;
    fate[p.weight].scale = p.scale;
    fate[p.weight].block_rows = p.block_rows;
    fate[p.weight].block_cols = p.block_cols;
    dropped[p.scale] = kConsumedScale;
    for (size_t d : p.dropped) {  // activation scales: meaningless once the weight is BF16
      dropped[d] = kConsumedScale;
      ++plan.dropped_activation_scales;
    }
    plan.dequantized_tensors.push_back(view.tensors[p.weight].name);
  }
  if (experts == ExpertMode::bf16)  // gpt-oss: X_blocks + X_scales -> BF16 X [E, K, R]
    for (const auto& b : blocks) {
      PlannedTensor& t = fate[b.blocks];
      t.action = TensorAction::dequant_mxfp4_blocks;
      t.scale = b.scales;
      t.experts = b.experts;
      t.rows = b.rows;
      t.k = b.k;
      dropped[b.scales] = kConsumedScale;
      plan.dequantized_tensors.push_back(view.tensors[b.blocks].name);
    }
  if (experts == ExpertMode::bf16)  // every MXFP4 expert weight with its E8M0 scale (pairing checked both)
    for (size_t i = 0; i < view.tensors.size(); ++i) {
      const ModelTensor& t = view.tensors[i];
      if (t.type != "I8" || !is_mxfp4_expert_name(t.name)) continue;
      const ModelTensor* scale = view.find(t.name.substr(0, t.name.size() - 7) + ".scale");
      if (!scale) continue;
      size_t s = static_cast<size_t>(scale - view.tensors.data());
      fate[i].action = TensorAction::dequant_mxfp4;
      fate[i].scale = s;
      dropped[s] = kConsumedScale;
      plan.dequantized_tensors.push_back(t.name);
    }
  for (const auto& m : fused)  // remapped experts: their per-expert tensors are consumed
    for (const auto& parts : m.parts)
      for (const auto& [weight, scale] : parts) dropped[weight] = dropped[scale] = kConsumedByRemap;
}

// The three INT8-shift tensors of a fused matrix (mxfp4-int8-shift.md §2).
void add_fused_tensors(const ConversionPlan& plan, size_t index, std::vector<WriterTensor>& writer,
                       std::unordered_map<std::string, PlannedTensor>& planned) {
  const FusedMatrix& m = plan.fused[index];
  const RemapParams& p = m.params;
  uint64_t kb = p.k / 32, groups = (p.rows + 7) / 8, shift_bytes = (kb + 3) / 4;
  std::string base = m.block + ".ffn.experts." + m.matrix;
  struct Out {
    const char* suffix;
    Dtype dtype;
    std::vector<uint64_t> shape;
    TensorAction action;
  };
  for (const Out& o : {Out{".mxfp4", Dtype::U8, {m.experts, kb, groups, 128}, TensorAction::remap_mxfp4},
                       Out{".shift2", Dtype::U8, {m.experts, shift_bytes, groups, 8}, TensorAction::remap_shift2},
                       Out{".channel_scale", Dtype::F32, {m.experts, p.rows}, TensorAction::remap_channel_scale}}) {
    writer.push_back(WriterTensor{base + o.suffix, o.dtype, o.shape, 0, 0});
    PlannedTensor t;
    t.action = o.action;
    t.fused = index;
    planned[base + o.suffix] = t;
  }
}

// What an output tensor is made of, for messages: "input tensor X of F (copied)", "input
// tensor X_blocks of F (dequantized)", "a fused INT8-shift tensor".
std::string output_source(const ModelView& view, const PlannedTensor& t) {
  if (t.input == SIZE_MAX) return "a fused INT8-shift tensor";
  const ModelTensor& in = view.tensors[t.input];
  return "input tensor " + in.name + " of " + view.files[in.file] +
         (t.action == TensorAction::copy ? " (copied)" : " (dequantized)");
}

// Output names are unique across the whole output, not only within a shard: a gpt-oss
// X_blocks dequantized to X in one shard and a tensor X copied in another would write X twice
// (and the output's own index and validation would fail). Finding names both sources.
bool check_output_names(const ModelView& view, const ConversionPlan& plan, Findings& f) {
  std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;  // name -> shard, entry
  bool ok = true;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    const PlannedShard& shard = plan.shards[s];
    for (size_t k = 0; k < shard.writer_tensors.size(); ++k) {
      auto [at, fresh] = seen.emplace(shard.writer_tensors[k].name, std::pair{s, k});
      if (fresh) continue;
      const PlannedShard& first = plan.shards[at->second.first];
      f.error("CONVERT_PLAN", shard.name, shard.writer_tensors[k].name, std::nullopt,
              "two output tensors would be named " + shard.writer_tensors[k].name + ": " +
                  output_source(view, first.tensors[at->second.second]) + " and " +
                  output_source(view, shard.tensors[k]) + "; the output would hold the name twice");
      ok = false;
    }
  }
  return ok;
}

bool plan_shard(const LoadedModel& in, const ConversionPlan& plan, uint32_t file,
                const std::vector<PlannedTensor>& fate, const std::vector<uint8_t>& dropped, PlannedShard& shard,
                Findings& f) {
  const ModelView& view = in.view;
  const Shard& src = in.checkpoint.shards[file];
  shard.name = view.files[file];
  shard.input_file = file;
  shard.input_bytes = src.file.size();
  if (src.header) shard.metadata = src.header->metadata;
  std::unordered_map<std::string, PlannedTensor> by_name;
  for (size_t i = 0; i < view.tensors.size(); ++i) {
    const ModelTensor& t = view.tensors[i];
    if (t.file != file) continue;
    if (dropped[i] != kKept) {
      ++(dropped[i] == kConsumedScale ? shard.dropped_scales : shard.consumed_expert_tensors);
      continue;
    }
    bool convert = fate[i].action != TensorAction::copy && fate[i].action != TensorAction::regrid_scale;
    std::vector<uint64_t> shape = t.shape;
    if (fate[i].action == TensorAction::regrid_scale) {  // [ceil(rows / new), ceil(cols / new)]
      shape = {fp8_scale_rows(Fp8Grid{fate[i].rows, fate[i].k, plan.regrid_rows, plan.regrid_cols}),
               fp8_scale_cols(Fp8Grid{fate[i].rows, fate[i].k, plan.regrid_rows, plan.regrid_cols})};
      ++shard.regridded_scales;
    }
    std::string name = t.name;
    if (fate[i].action == TensorAction::dequant_mxfp4) {  // [N, K/2] packed -> [N, K]
      shape[1] *= 2;
      ++shard.dequantized_experts;
    }
    if (fate[i].action == TensorAction::dequant_mxfp4_blocks) {  // X_blocks [E, R, K/32, 16] -> X [E, K, R]
      name = name.substr(0, name.size() - plan.pairing.scheme.weight_suffix.size());
      shape = t.shape.size() == 4 ? std::vector<uint64_t>{fate[i].experts, fate[i].k, fate[i].rows}
                                  : std::vector<uint64_t>{fate[i].k, fate[i].rows};
      ++shard.dequantized_experts;
    }
    shard.writer_tensors.push_back(WriterTensor{name, convert ? Dtype::BF16 : *t.dtype, shape, 0, 0});
    if (auto [at, fresh] = by_name.emplace(name, fate[i]); !fresh) {
      f.error("CONVERT_PLAN", shard.name, name, std::nullopt,
              "two output tensors would be named " + name + ": " + output_source(view, at->second) + " and " +
                  output_source(view, fate[i]) + ", both in " + shard.name);
      return false;
    }
    if (fate[i].action != TensorAction::regrid_scale) (convert ? shard.converted : shard.copied) += 1;
  }
  // A fused matrix lives in the shard of its expert 0's w1 weight.
  for (size_t m = 0; m < plan.fused.size(); ++m)
    if (view.tensors[plan.fused[m].parts[0][0].first].file == file) {
      add_fused_tensors(plan, m, shard.writer_tensors, by_name);
      shard.converted += 3;
    }
  std::string error;
  if (!plan_safetensors(shard.writer_tensors, shard.metadata, shard.header, shard.payload_bytes, error)) {
    f.error("CONVERT_PLAN", shard.name, "", std::nullopt, "cannot lay out the output shard: " + error);
    return false;
  }
  for (const auto& w : shard.writer_tensors) shard.tensors.push_back(by_name.at(w.name));
  shard.file_bytes = 8 + shard.header.size() + shard.payload_bytes;
  return true;
}

void add_totals(const ModelView& view, ConversionPlan& plan) {
  for (const auto& s : plan.shards) {
    plan.tensors_out += s.writer_tensors.size();
    plan.payload_out += s.payload_bytes;
    plan.converted += s.converted;
    plan.copied += s.copied;
    plan.dropped_scales += s.dropped_scales;
    plan.consumed_expert_tensors += s.consumed_expert_tensors;
    plan.dequantized_experts += s.dequantized_experts;
    plan.regridded_scales += s.regridded_scales;
    plan.bytes_in += s.input_bytes;
    plan.shard_bytes_out += s.file_bytes;
    for (const auto& w : s.writer_tensors) {
      if (w.dtype == Dtype::F8_E4M3) plan.output_has_fp8 = true;
      if (w.dtype == Dtype::I8 && is_mxfp4_expert_name(w.name)) {
        ++plan.expert_weight_tensors;
        plan.output_has_mxfp4_experts = true;
      }
      if (w.dtype == Dtype::BF16 && is_mxfp4_expert_name(w.name)) ++plan.expert_weight_tensors;
      if (w.dtype == Dtype::U8 && plan.pairing.scheme.shape == ScaleShape::mxfp4_blocks &&
          w.name.ends_with(plan.pairing.scheme.weight_suffix))
        plan.output_has_mxfp4_experts = true;  // gpt-oss blocks kept (--experts keep)
      if (w.name.rfind("mtp.", 0) == 0) ++plan.mtp_tensors;
    }
    for (const auto& t : s.tensors) {
      plan.remapped_expert_tensors += t.action == TensorAction::remap_mxfp4 ? 1 : 0;
      if (t.action != TensorAction::dequant_mxfp4 && t.action != TensorAction::dequant_mxfp4_blocks) continue;
      plan.expert_bytes_in += view.tensors[t.input].nbytes + view.tensors[t.scale].nbytes;
      plan.expert_bytes_out += 4 * view.tensors[t.input].nbytes;  // two BF16 values per packed byte
    }
  }
  for (const char* module : kProjectionModules)
    if (has_module(view, module)) plan.extra_bf16_modules.push_back(module);
}

// The profile, its pairing rules and every FP8 / MXFP4 pair of the input (model/pairing.h),
// the same for a conversion and a relayout; false when the pairing found errors (appended).
bool pair_input(const LoadedModel& in, ConversionPlan& plan, std::vector<Fp8Pair>& pairs,
                std::vector<Mxfp4BlocksPair>& blocks, Findings& findings) {
  plan.profile = detect_profile(in);
  Findings pairing;
  plan.pairing = pairing_options_for(in, plan.profile, pairing);
  plan.quant_profile = plan.pairing.scheme.profile;
  check_fp8_pairing(in.view, plan.pairing, pairing, &pairs, &blocks);
  findings.append(pairing);
  return !pairing.has_errors();
}

// From the tensors' fates to the whole plan: one output shard per input file, the output
// names checked, the totals, the side files and the input's structure hash.
bool plan_output(const LoadedModel& in, const std::vector<PlannedTensor>& fate, const std::vector<uint8_t>& dropped,
                 ConversionPlan& plan, Findings& findings) {
  for (uint32_t file = 0; file < in.view.files.size(); ++file) {
    plan.shards.emplace_back();
    if (!plan_shard(in, plan, file, fate, dropped, plan.shards.back(), findings)) return false;
  }
  if (!check_output_names(in.view, plan, findings)) return false;
  add_totals(in.view, plan);  // before the side files: output_has_fp8 decides hf_quant_config.json's fate
  if (!list_side_files(in.checkpoint, plan, findings)) return false;
  plan.source_structure_sha256 = structure_hash_of(in.view);
  return true;
}

}  // namespace

const char* expert_mode_name(ExpertMode m) {
  return m == ExpertMode::int8_shift ? "int8-shift" : m == ExpertMode::bf16 ? "bf16" : "keep";
}

bool plan_conversion(const LoadedModel& in, ExpertMode experts, const RemapOptions& remap, ConversionPlan& plan,
                     Findings& findings) {
  plan = ConversionPlan{};
  plan.experts = experts;
  plan.remap = remap;
  if (in.format != ModelFormat::safetensors) {
    findings.error("CONVERT_INPUT", in.path, "", std::nullopt, "convert reads safetensors checkpoints, not GGUF");
    return false;
  }
  std::vector<Fp8Pair> pairs;
  std::vector<Mxfp4BlocksPair> blocks;
  if (!pair_input(in, plan, pairs, blocks, findings)) return false;
  if (experts == ExpertMode::int8_shift && !blocks.empty()) {
    findings.error("REMAP_EXPERTS", in.path, in.view.tensors[blocks.front().blocks].name, std::nullopt,
                   "--experts int8-shift reads routed experts as per-expert *.ffn.experts.E.w{1,2,3}.weight "
                   "(deepseek-v4 layout); these are fused gpt-oss " + plan.quant_profile +
                   " X_blocks/X_scales, which the remap does not take yet; use --experts bf16 or keep");
    return false;
  }

  if (experts == ExpertMode::int8_shift && !plan_fused(in.view, remap, plan.fused, findings)) return false;
  std::vector<PlannedTensor> fate;
  std::vector<uint8_t> dropped;
  classify(in.view, experts, pairs, blocks, plan.fused, fate, dropped, plan);
  return plan_output(in, fate, dropped, plan, findings);
}

bool plan_regrid(const LoadedModel& in, const RegridRequest& request, ConversionPlan& plan, Findings& findings) {
  plan = ConversionPlan{};
  plan.regrid_rows = request.block_rows;
  plan.regrid_cols = request.block_cols;
  if (in.format != ModelFormat::safetensors) {
    findings.error("RELAYOUT_INPUT", in.path, "", std::nullopt, "relayout reads safetensors checkpoints, not GGUF");
    return false;
  }
  if (!request.block_rows || !request.block_cols || !std::is_sorted(request.promoted.begin(), request.promoted.end())) {
    findings.error("CONVERT_INTERNAL", in.path, "", std::nullopt, "a relayout request without a block");
    return false;
  }
  std::vector<Fp8Pair> pairs;
  std::vector<Mxfp4BlocksPair> blocks;
  if (!pair_input(in, plan, pairs, blocks, findings)) return false;
  std::vector<PlannedTensor> fate;
  std::vector<uint8_t> dropped;
  classify(in.view, ExpertMode::keep, pairs, blocks, plan.fused, fate, dropped, plan, &request);
  return plan_output(in, fate, dropped, plan, findings);
}

Fp8Grid planned_fp8_grid(const ConversionPlan& plan, const PlannedTensor& t, const ModelTensor& weight) {
  const uint64_t rows = weight.shape.empty() ? 0 : weight.shape[0];
  const uint64_t cols = weight.shape.size() > 1 ? weight.shape[1] : 1;
  return Fp8Grid{rows, cols, t.block_rows ? t.block_rows : plan.pairing.block_rows,
                 t.block_cols ? t.block_cols : plan.pairing.block_cols};
}

std::vector<size_t> tensor_inputs(const ConversionPlan& plan, const PlannedTensor& t) {
  std::vector<size_t> inputs;
  if (t.input != SIZE_MAX) inputs.push_back(t.input);
  if (t.scale != SIZE_MAX) inputs.push_back(t.scale);
  if (t.fused != SIZE_MAX)
    for (const auto& parts : plan.fused[t.fused].parts)
      for (const auto& [weight, scale] : parts) {
        if (t.action == TensorAction::remap_mxfp4) inputs.push_back(weight);
        inputs.push_back(scale);
      }
  return inputs;
}

}  // namespace ckpt
