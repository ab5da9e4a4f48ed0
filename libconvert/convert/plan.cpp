#include "convert/plan.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include "profiles/registry.h"
#include "validate/structure_hash.h"

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
// shards, the index and config.json (rewritten) excluded.
void list_side_files(const Checkpoint& ck, ConversionPlan& plan) {
  if (!ck.is_directory) return;
  std::error_code ec;
  fs::path root(ck.root);
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec)) continue;
    std::string rel = it->path().lexically_relative(root).string();
    if (rel == kIndexName || rel == "config.json" || name.ends_with(".safetensors")) continue;
    plan.side_files.push_back(rel);
    plan.side_bytes += it->file_size(ec);
  }
  std::sort(plan.side_files.begin(), plan.side_files.end());
}

std::string structure_hash_of(const ModelView& view) {
  std::vector<StructureRecord> records;
  records.reserve(view.tensors.size());
  for (const auto& t : view.tensors) records.push_back(StructureRecord{t.name, t.type, t.shape, t.nbytes});
  return structure_sha256(std::move(records));
}

// Decides each input tensor's fate: converted (paired FP8 weight), dropped (its scale)
// or copied (everything else, MXFP4 experts and their scales included).
void classify(const ModelView& view, const std::vector<Fp8Pair>& pairs, std::vector<PlannedTensor>& fate,
              std::vector<bool>& dropped) {
  fate.assign(view.tensors.size(), PlannedTensor{});
  dropped.assign(view.tensors.size(), false);
  for (size_t i = 0; i < view.tensors.size(); ++i) fate[i].input = i;
  for (const auto& p : pairs) {
    fate[p.weight].action = p.f32_scale ? TensorAction::dequant_f32 : TensorAction::dequant_e8m0;
    fate[p.weight].scale = p.scale;
    dropped[p.scale] = true;
  }
}

bool plan_shard(const LoadedModel& in, uint32_t file, const std::vector<PlannedTensor>& fate,
                const std::vector<bool>& dropped, PlannedShard& shard, Findings& f) {
  const ModelView& view = in.view;
  const Shard& src = in.checkpoint.shards[file];
  shard.name = view.files[file];
  shard.input_file = file;
  shard.input_bytes = src.file.size();
  if (src.header) shard.metadata = src.header->metadata;
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < view.tensors.size(); ++i) {
    const ModelTensor& t = view.tensors[i];
    if (t.file != file) continue;
    if (dropped[i]) {
      ++shard.dropped_scales;
      continue;
    }
    bool convert = fate[i].action != TensorAction::copy;
    shard.writer_tensors.push_back(WriterTensor{t.name, convert ? Dtype::BF16 : *t.dtype, t.shape, 0, 0});
    by_name.emplace(t.name, i);
    (convert ? shard.converted : shard.copied) += 1;
  }
  std::string error;
  if (!plan_safetensors(shard.writer_tensors, shard.metadata, shard.header, shard.payload_bytes, error)) {
    f.error("CONVERT_PLAN", shard.name, "", std::nullopt, "cannot lay out the output shard: " + error);
    return false;
  }
  for (const auto& w : shard.writer_tensors) shard.tensors.push_back(fate[by_name.at(w.name)]);
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
    plan.bytes_in += s.input_bytes;
    plan.shard_bytes_out += s.file_bytes;
    for (const auto& w : s.writer_tensors) {
      if (w.dtype == Dtype::F8_E4M3) plan.output_has_fp8 = true;
      if (w.dtype == Dtype::I8 && is_mxfp4_expert_name(w.name)) {
        ++plan.expert_weight_tensors;
        plan.output_has_mxfp4_experts = true;
      }
      if (w.name.rfind("mtp.", 0) == 0) ++plan.mtp_tensors;
    }
  }
  for (const char* module : kProjectionModules)
    if (has_module(view, module)) plan.extra_bf16_modules.push_back(module);
}

}  // namespace

bool plan_conversion(const LoadedModel& in, ExpertMode experts, ConversionPlan& plan, Findings& findings) {
  plan = ConversionPlan{};
  plan.experts = experts;
  if (in.format != ModelFormat::safetensors) {
    findings.error("CONVERT_INPUT", in.path, "", std::nullopt, "convert reads safetensors checkpoints, not GGUF");
    return false;
  }
  plan.profile = detect_profile(in);
  Findings pairing;
  plan.pairing = pairing_options_for(in, plan.profile, pairing);
  std::vector<Fp8Pair> pairs;
  check_fp8_pairing(in.view, plan.pairing, pairing, &pairs);
  findings.append(pairing);
  if (pairing.has_errors()) return false;

  std::vector<PlannedTensor> fate;
  std::vector<bool> dropped;
  classify(in.view, pairs, fate, dropped);
  for (uint32_t file = 0; file < in.view.files.size(); ++file) {
    plan.shards.emplace_back();
    if (!plan_shard(in, file, fate, dropped, plan.shards.back(), findings)) return false;
  }
  list_side_files(in.checkpoint, plan);
  add_totals(in.view, plan);
  plan.source_structure_sha256 = structure_hash_of(in.view);
  return true;
}

}  // namespace ckpt
