#include "convert/records.h"

#include "core/display.h"
#include "io/input_file.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

#include <tbb/parallel_for.h>

#include "formats/json.h"
#include "formats/json_writer.h"
#include "io/hash.h"
#include "io/mapped_file.h"

namespace ckpt {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kMaxRecordBytes = 64ull << 20;
constexpr uint64_t kHashStep = 1u << 20;

// Length-prefixed fields into one xxh3, so ("ab", "c") and ("a", "bc") differ.
class IdentityHash {
 public:
  IdentityHash& add(uint64_t v) {
    h_.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), sizeof v));
    return *this;
  }
  IdentityHash& add(std::string_view s) {
    add(static_cast<uint64_t>(s.size()));
    h_.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
    return *this;
  }
  IdentityHash& add(const std::vector<uint64_t>& shape) {
    add(static_cast<uint64_t>(shape.size()));
    for (uint64_t d : shape) add(d);
    return *this;
  }
  std::string hex() const { return xxh3_hex(h_.digest()); }

 private:
  Xxh3 h_;
};

std::string hex_of_text(std::string_view text) { return IdentityHash().add(text).hex(); }

// Every parameter a shard's bytes depend on besides its inputs, as the user sets it.
std::vector<std::pair<std::string, std::string>> conversion_params(const ConversionPlan& plan) {
  if (plan.regrid_rows)  // ckpt relayout: the block every kept FP8 weight's scales are re-gridded to
    return {{"weight_block_size",
             "[" + std::to_string(plan.pairing.block_rows) + ", " + std::to_string(plan.pairing.block_cols) + "]"},
            {"relayout_block", "[" + std::to_string(plan.regrid_rows) + ", " + std::to_string(plan.regrid_cols) + "]"},
            {"profile", plan.profile}};
  return {{"--experts", expert_mode_name(plan.experts)},
          {"--headroom-bits", std::to_string(plan.remap.headroom)},
          {"--rounding", remap_rounding_name(plan.remap.rounding)},
          {"weight_block_size",
           "[" + std::to_string(plan.pairing.block_rows) + ", " + std::to_string(plan.pairing.block_cols) + "]"},
          {"profile", plan.profile}};
}

// How every output tensor is computed: its action and each input's name, dtype, shape and range.
std::string recipe_hash(const ModelView& view, const ConversionPlan& plan, const PlannedShard& shard) {
  IdentityHash h;
  h.add(static_cast<uint64_t>(plan.pairing.allow_bare_fp8_names));
  // The quantization profile decides what a scale means; V4's (and the legacy rules) add nothing,
  // so records written before profiles existed still match.
  if (!plan.quant_profile.empty() && plan.quant_profile != "deepseek-v4") h.add(plan.quant_profile);
  for (size_t k = 0; k < shard.tensors.size(); ++k) {
    const PlannedTensor& t = shard.tensors[k];
    h.add(shard.writer_tensors[k].name).add(static_cast<uint64_t>(t.action));
    if ((t.block_rows && t.block_rows != plan.pairing.block_rows) || (t.block_cols && t.block_cols != plan.pairing.block_cols))
      h.add(t.block_rows).add(t.block_cols);  // per-channel / per-tensor scales
    if (t.action == TensorAction::dequant_mxfp4_blocks) h.add(t.experts).add(t.rows).add(t.k);
    if (t.fused != SIZE_MAX) {
      const RemapParams& p = plan.fused[t.fused].params;
      h.add(p.rows).add(p.k).add(static_cast<uint64_t>(p.headroom)).add(static_cast<uint64_t>(p.rounding));
    }
    for (size_t i : tensor_inputs(plan, t)) {
      const ModelTensor& in = view.tensors[i];
      h.add(view.files[in.file]).add(in.name).add(in.type).add(in.shape).add(in.offset).add(in.nbytes);
    }
  }
  return h.hex();
}

std::string inputs_hash(const ShardRecord& rec) {
  IdentityHash h;
  for (const auto& r : rec.inputs) h.add(rec.input_files[r.file]).add(r.offset).add(r.length).add(r.xxh3);
  return h.hex();
}

// xxh3 of one input byte range, read with pread in bounded steps.
std::optional<uint64_t> hash_range(const MappedFile& f, uint64_t offset, uint64_t length, std::string& error) {
  thread_local std::vector<uint8_t> buffer;
  buffer.resize(kHashStep);
  Xxh3 h;
  for (uint64_t done = 0; done < length;) {
    uint64_t n = std::min(kHashStep, length - done);
    IoError err;
    if (!f.read_at(offset + done, std::span<uint8_t>(buffer.data(), n), err)) {
      error = err.message;
      return std::nullopt;
    }
    h.update(std::span<const uint8_t>(buffer.data(), n));
    done += n;
  }
  return h.digest();
}

// Input ranges hashed during one verification, so a scale that several shards share is
// read once.
class RangeHashes {
 public:
  explicit RangeHashes(const LoadedModel& in) : in_(in) {}
  std::optional<uint64_t> get(uint32_t file, uint64_t offset, uint64_t length, std::string& error) {
    const auto key = std::make_tuple(file, offset, length);
    {
      std::lock_guard lock(mutex_);
      if (auto it = done_.find(key); it != done_.end()) return it->second;
    }
    auto h = hash_range(in_.checkpoint.shards[file].file, offset, length, error);
    if (h) {
      std::lock_guard lock(mutex_);
      done_[key] = *h;
    }
    return h;
  }

 private:
  const LoadedModel& in_;
  std::mutex mutex_;
  std::map<std::tuple<uint32_t, uint64_t, uint64_t>, uint64_t> done_;
};

// A bounded, regular, non-symlink file into `text`.
bool read_small_file(const std::string& path, uint64_t limit, std::string& text) {
  IoError err;
  return read_input_file(path, limit, text, err, InputLinks::refuse);
}

bool record_complete(const ShardRecord& rec) {
  if (rec.output_size == UINT64_MAX || !is_hex_digest(rec.output_xxh3, 16) || !is_hex_digest(rec.plan_xxh3, 16) ||
      !is_hex_digest(rec.recipe_xxh3, 16) || !is_hex_digest(rec.input_xxh3, 16))
    return false;
  for (const auto& r : rec.inputs)
    if (!is_hex_digest(r.xxh3, 16) || r.file >= rec.input_files.size()) return false;
  return true;
}

const std::string* param_of(const ShardRecord& rec, const std::string& key) {
  for (const auto& [k, v] : rec.params)
    if (k == key) return &v;
  return nullptr;
}

// Why `rec` is not the identity `want` asks for, without reading any payload; "" when it is.
std::string identity_difference(const ShardRecord& rec, const ShardRecord& want) {
  if (rec.tool_version != want.tool_version)
    return "it was written by ckptkit " + (rec.tool_version.empty() ? "(unknown)" : rec.tool_version) +
           "; this is ckptkit " + want.tool_version;
  for (const auto& [key, value] : want.params) {
    const std::string* was = param_of(rec, key);
    if (!was || *was != value)
      return "it was written with " + key + " " + (was ? *was : "(not recorded)") + "; this run uses " + key + " " +
             value;
  }
  if (rec.plan_xxh3 != want.plan_xxh3)
    return "its output header differs from this run's plan (other tensors, dtypes, shapes or metadata)";
  if (rec.recipe_xxh3 != want.recipe_xxh3)
    return "the input tensors it is computed from differ from this run's plan (pairing, scales or fused experts)";
  bool same_ranges = rec.inputs.size() == want.inputs.size();
  for (size_t i = 0; same_ranges && i < rec.inputs.size(); ++i)
    same_ranges = rec.input_files[rec.inputs[i].file] == want.input_files[want.inputs[i].file] &&
                  rec.inputs[i].offset == want.inputs[i].offset && rec.inputs[i].length == want.inputs[i].length;
  if (!same_ranges) return "its input byte ranges differ from this run's plan";
  return "";
}

ShardVerdict verdict(ShardState state, std::string detail, std::optional<ShardRecord> rec = std::nullopt) {
  return ShardVerdict{state, std::move(detail), std::move(rec)};
}

// The shard's input ranges, re-read and compared one by one, then input_xxh3 over them.
ShardVerdict check_inputs(const ModelView& view, const ShardRecord& want, ShardRecord& rec, RangeHashes& hashes) {
  ShardRecord now = want;
  for (size_t i = 0; i < want.inputs.size(); ++i) {
    const RecordRange& r = want.inputs[i];
    const ModelTensor& t = view.tensors[want.input_tensors[i]];
    const std::string range = view.files[t.file] + " bytes " + std::to_string(r.offset) + "+" + std::to_string(r.length);
    std::string error;
    auto h = hashes.get(t.file, r.offset, r.length, error);
    if (!h) return verdict(ShardState::stale, "its input " + t.name + " (" + range + ") cannot be read: " + error);
    now.inputs[i].xxh3 = xxh3_hex(*h);
    if (now.inputs[i].xxh3 != rec.inputs[i].xxh3)
      return verdict(ShardState::stale, "its input " + t.name + " (" + range +
                                            ") changed since the shard was converted (xxh3 " + now.inputs[i].xxh3 +
                                            ", recorded " + rec.inputs[i].xxh3 + ")");
  }
  if (inputs_hash(now) != rec.input_xxh3)
    return verdict(ShardState::incomplete, "its record is inconsistent (input_xxh3 does not cover its input ranges)");
  return verdict(ShardState::ok, "");
}

ShardVerdict verify_shard(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard,
                          const std::string& out_dir, RangeHashes& hashes) {
  const std::string path = record_path(out_dir, shard.name);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return verdict(ShardState::missing, "it has no record");
  auto rec = read_record(path);
  if (!rec) return verdict(ShardState::incomplete, "its record " + path + " is unreadable or incomplete");
  if (rec->version != kRecordVersion)
    return verdict(ShardState::stale, "its record (format " + std::to_string(rec->version) + ", ckptkit " +
                                          (rec->tool_version.empty() ? "unknown" : rec->tool_version) +
                                          ") does not cover every input and option; records are format " +
                                          std::to_string(kRecordVersion), rec);
  if (rec->shard != shard.name)
    return verdict(ShardState::incomplete, "its record " + path + " names another shard", rec);
  if (rec->state != "done")
    return verdict(ShardState::incomplete, "its conversion did not finish (the record says '" + rec->state + "')", rec);
  if (!record_complete(*rec))
    return verdict(ShardState::incomplete, "its record " + path + " is unreadable or incomplete", rec);
  const ShardRecord want = planned_record(in, plan, shard);
  if (std::string why = identity_difference(*rec, want); !why.empty()) return verdict(ShardState::stale, why, rec);

  const std::string out_path = (fs::path(out_dir) / shard.name).string();
  uint64_t size = fs::file_size(out_path, ec);
  if (ec) return verdict(ShardState::output_missing, "the output file is missing", rec);
  if (size != rec->output_size)
    return verdict(ShardState::output_mismatch, "the output is " + std::to_string(size) + " bytes, the record says " +
                                                    std::to_string(rec->output_size), rec);
  ShardVerdict inputs = check_inputs(in.view, want, *rec, hashes);
  if (inputs.state != ShardState::ok) {
    inputs.record = rec;
    return inputs;
  }
  auto hash = file_xxh3(out_path);
  if (!hash || *hash != rec->output_xxh3)
    return verdict(ShardState::output_mismatch,
                   hash ? "the output hashes to xxh3 " + *hash + ", the record says " + rec->output_xxh3
                        : "the output cannot be read",
                   rec);
  return verdict(ShardState::ok, "", rec);
}

}  // namespace

std::string record_file_name(const std::string& shard) {
  if (shard.size() + 5 <= NAME_MAX) return shard + ".json";
  return "~" + hex_of_text(shard) + ".json";
}

std::string record_path(const std::string& out_dir, const std::string& shard) {
  return (fs::path(out_dir) / ".ckptkit" / "records" / record_file_name(shard)).string();
}

ShardRecord planned_record(const LoadedModel& in, const ConversionPlan& plan, const PlannedShard& shard) {
  const ModelView& view = in.view;
  ShardRecord r;
  r.version = kRecordVersion;
  r.shard = shard.name;
  r.state = "writing";
  r.tool_version = CKPT_VERSION;
  r.params = conversion_params(plan);
  r.plan_xxh3 = hex_of_text(shard_header_bytes(shard));
  r.recipe_xxh3 = recipe_hash(view, plan, shard);
  std::vector<size_t> inputs;
  for (const auto& t : shard.tensors)
    for (size_t i : tensor_inputs(plan, t)) inputs.push_back(i);
  std::sort(inputs.begin(), inputs.end(), [&](size_t a, size_t b) {
    const ModelTensor &x = view.tensors[a], &y = view.tensors[b];
    return std::tie(x.file, x.offset, a) < std::tie(y.file, y.offset, b);
  });
  inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
  std::map<uint32_t, uint32_t> file_slot;
  for (size_t i : inputs) {
    const ModelTensor& t = view.tensors[i];
    auto [it, added] = file_slot.emplace(t.file, static_cast<uint32_t>(r.input_files.size()));
    if (added) r.input_files.push_back(view.files[t.file]);
    r.inputs.push_back(RecordRange{it->second, t.offset, t.nbytes, ""});
    r.input_tensors.push_back(i);
  }
  return r;
}

bool finish_record(const LoadedModel& in, const ShardWriteResult& written, ShardRecord& rec, std::string& error) {
  std::map<size_t, uint64_t> digest(written.input_digests.begin(), written.input_digests.end());
  const std::set<size_t> listed(rec.input_tensors.begin(), rec.input_tensors.end());
  for (const auto& [tensor, d] : written.input_digests)
    if (!listed.count(tensor)) {
      error = "internal error: shard " + rec.shard + " read " + in.view.tensors[tensor].name +
              ", which its resume identity does not list (plan/plan.h tensor_inputs)";
      return false;
    }
  for (size_t i = 0; i < rec.inputs.size(); ++i) {
    auto it = digest.find(rec.input_tensors[i]);
    std::optional<uint64_t> h = it != digest.end() ? std::optional<uint64_t>(it->second) : std::nullopt;
    if (!h) {  // listed but not streamed by the writer: hash it from the file
      const ModelTensor& t = in.view.tensors[rec.input_tensors[i]];
      h = hash_range(in.checkpoint.shards[t.file].file, t.offset, t.nbytes, error);
      if (!h) return false;
    }
    rec.inputs[i].xxh3 = xxh3_hex(*h);
  }
  rec.input_xxh3 = inputs_hash(rec);
  rec.output_size = written.output_size;
  rec.output_xxh3 = xxh3_hex(written.output_xxh3);
  rec.state = "done";
  return true;
}

std::string record_json(const ShardRecord& rec) {
  JsonWriter w;
  w.begin_object();
  w.key("format").value("ckptkit-shard-record").key("version").value(rec.version);
  w.key("shard").value(rec.shard).key("state").value(rec.state).key("tool_version").value(rec.tool_version);
  w.key("params").begin_object();
  for (const auto& [k, v] : rec.params) w.key(k).value(v);
  w.end_object();
  w.key("plan_xxh3").value(rec.plan_xxh3).key("recipe_xxh3").value(rec.recipe_xxh3);
  w.key("input_files").begin_array();
  for (const auto& f : rec.input_files) w.value(f);
  w.end_array();
  w.key("inputs").begin_array();  // [file, offset, length, xxh3]
  for (const auto& r : rec.inputs) w.begin_array().value(r.file).value(r.offset).value(r.length).value(r.xxh3).end_array();
  w.end_array();
  w.key("input_xxh3").value(rec.input_xxh3);
  if (rec.state == "done") w.key("output_size").value(rec.output_size).key("output_xxh3").value(rec.output_xxh3);
  if (rec.partition_count > 0)
    w.key("partition").begin_object().key("index").value(rec.partition_index).key("count").value(rec.partition_count)
        .end_object();
  w.end_object();
  return w.str() + "\n";
}

std::optional<ShardRecord> read_record(const std::string& path) {
  std::string text, error;
  if (!read_small_file(path, kMaxRecordBytes, text)) return std::nullopt;
  JsonDoc doc;
  if (!doc.parse(text, error) || !doc.root().is_object()) return std::nullopt;
  auto root = doc.root();
  ShardRecord r;
  r.version = static_cast<int>(std::clamp<int64_t>(json_int(root, "version").value_or(0), 0, INT_MAX));
  // Names as record_json wrote them (json_string_literal's byte escape undone).
  r.shard = json_unescape_bytes(json_string(root, "shard").value_or(""));
  r.state = json_string(root, "state").value_or("");
  r.tool_version = json_string(root, "tool_version").value_or("");
  simdjson::dom::object params;
  if (auto p = json_get(root, "params"); p && !p->get_object().get(params))
    for (auto field : params) {
      std::string_view value;
      if (!field.value.get_string().get(value)) r.params.emplace_back(std::string(field.key), std::string(value));
    }
  r.plan_xxh3 = json_string(root, "plan_xxh3").value_or("");
  r.recipe_xxh3 = json_string(root, "recipe_xxh3").value_or("");
  simdjson::dom::array files, inputs;
  if (auto f = json_get(root, "input_files"); f && !f->get_array().get(files))
    for (auto name : files) {
      std::string_view text;
      r.input_files.push_back(json_unescape_bytes(name.get_string().get(text) ? std::string_view() : text));
    }
  if (auto i = json_get(root, "inputs"); i && !i->get_array().get(inputs))
    for (auto item : inputs) {
      simdjson::dom::array a;
      if (item.get_array().get(a) || a.size() != 4) return std::nullopt;
      uint64_t file = 0, offset = 0, length = 0;
      std::string_view xxh3;
      if (a.at(0).get_uint64().get(file) || a.at(1).get_uint64().get(offset) || a.at(2).get_uint64().get(length) ||
          a.at(3).get_string().get(xxh3) || file > UINT32_MAX)
        return std::nullopt;
      r.inputs.push_back(RecordRange{static_cast<uint32_t>(file), offset, length, std::string(xxh3)});
    }
  r.input_xxh3 = json_string(root, "input_xxh3").value_or("");
  if (auto size = json_int(root, "output_size"); size && *size >= 0) r.output_size = static_cast<uint64_t>(*size);
  r.output_xxh3 = json_string(root, "output_xxh3").value_or("");
  if (auto p = json_get(root, "partition")) {
    auto index = json_int(*p, "index"), count = json_int(*p, "count");
    if (index && count && *index >= 0 && *count > *index && *count <= UINT32_MAX) {
      r.partition_index = static_cast<uint32_t>(*index);
      r.partition_count = static_cast<uint32_t>(*count);
    }
  }
  return r;
}

std::optional<std::string> file_xxh3(const std::string& path) {
  MappedFile f;
  IoError err;
  if (!f.open(path, err)) return std::nullopt;
  std::string error;
  auto h = hash_range(f, 0, f.size(), error);
  if (!h) return std::nullopt;
  return xxh3_hex(*h);
}

std::vector<ShardVerdict> verify_shards(const LoadedModel& in, const ConversionPlan& plan, const std::string& out_dir,
                                        const std::vector<bool>& which) {
  std::vector<ShardVerdict> verdicts(plan.shards.size());
  RangeHashes hashes(in);
  tbb::parallel_for(size_t{0}, plan.shards.size(), [&](size_t i) {
    if (which.empty() || which[i]) verdicts[i] = verify_shard(in, plan, plan.shards[i], out_dir, hashes);
  }, tbb::simple_partitioner());
  return verdicts;
}

}  // namespace ckpt
