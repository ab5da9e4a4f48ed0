#include "convert/convert.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <map>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include "plan/config_rewrite.h"
#include "convert/finalize.h"
#include "convert/records.h"
#include "convert/shard_writer.h"
#include "formats/json.h"
#include "io/atomic_file.h"
#include "io/hash.h"
#include "formats/json_writer.h"

namespace ckpt {
namespace fs = std::filesystem;

namespace {

ConvertReport& fail(ConvertReport& r, ConvertStatus status, const char* code, const std::string& file,
                    const std::string& message) {
  r.status = status;
  r.findings.error(code, file, "", std::nullopt, message);
  return r;
}

bool is_inside(const fs::path& child, const fs::path& parent) {
  auto rel = child.lexically_relative(parent);
  return !rel.empty() && *rel.begin() != "..";
}

// OUT may not be IN, inside IN, or contain IN; a non-empty OUT needs --resume or --overwrite.
bool check_paths(const ConvertOptions& o, ConvertReport& r) {
  std::error_code ec;
  fs::path in = fs::weakly_canonical(o.input, ec), out = fs::weakly_canonical(o.output, ec);
  if (in == out || is_inside(out, in) || is_inside(in, out)) {
    fail(r, ConvertStatus::usage_error, "CONVERT_PATHS", o.output,
         "output " + o.output + " and input " + o.input + " overlap; choose an output outside the input");
    return false;
  }
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) {
    fail(r, ConvertStatus::usage_error, "CONVERT_PATHS", o.output, o.output + " exists and is not a directory");
    return false;
  }
  bool non_empty = fs::is_directory(out, ec) && fs::directory_iterator(out, ec) != fs::directory_iterator();
  // Partitions share OUT (each writes only its own shards); --finalize reads it.
  bool shared_out = o.partition.active() || o.finalize;
  if (non_empty && !o.resume && !o.overwrite && !o.dry_run && !shared_out) {
    fail(r, ConvertStatus::usage_error, "CONVERT_OUTPUT_NOT_EMPTY", o.output,
         o.output + " is not empty; pass --resume to finish an interrupted conversion or --overwrite to replace it");
    return false;
  }
  return true;
}

bool read_text(const std::string& path, std::string& text) {
  MappedFile f;
  IoError err;
  if (!f.open(path, err) || f.size() > kMaxSideJsonBytes) return false;
  auto b = f.bytes();
  text.assign(reinterpret_cast<const char*>(b.data()), b.size());
  return true;
}

bool rewrite_input_config(const LoadedModel& in, ConvertReport& r) {
  if (!in.checkpoint.is_directory || !in.checkpoint.config) return true;
  std::string text, error;
  if (!read_text((fs::path(in.checkpoint.root) / "config.json").string(), text)) return true;
  ConfigRewriteInput cri;
  cri.experts_mode = expert_mode_name(r.plan.experts);
  if (r.plan.experts == ExpertMode::bf16) cri.expert_dtype = "bf16";
  if (r.plan.experts == ExpertMode::int8_shift && !r.plan.fused.empty()) {
    cri.expert_headroom_bits = r.plan.remap.headroom;
    cri.expert_rounding = remap_rounding_name(r.plan.remap.rounding);
  }
  cri.converted_tensors = r.plan.converted;
  cri.dropped_scales = r.plan.dropped_scales;
  cri.output_has_fp8 = r.plan.output_has_fp8;
  // INT8-shift experts still load through the quantized route.
  cri.output_has_mxfp4_experts = r.plan.output_has_mxfp4_experts || !r.plan.fused.empty();
  cri.extra_bf16_modules = r.plan.extra_bf16_modules;
  cri.tool_version = CKPT_VERSION;
  cri.source_structure_sha256 = r.plan.source_structure_sha256;
  if (!rewrite_config(text, cri, r.config_json, error)) {
    fail(r, ConvertStatus::input_error, "CFG_PARSE", "config.json", "cannot rewrite config.json: " + error);
    return false;
  }
  return true;
}

std::string index_json(const ConversionPlan& plan) {
  std::map<std::string, std::string> weight_map;  // sorted keys, as the reference writes them
  for (const auto& s : plan.shards)
    for (const auto& t : s.writer_tensors) weight_map[t.name] = s.name;
  std::string out = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(plan.payload_out) +
                    "\n  },\n  \"weight_map\": {";
  bool first = true;
  for (const auto& [tensor, shard] : weight_map) {
    out += first ? "\n    " : ",\n    ";
    out += json_quote(tensor) + ": " + json_quote(shard);
    first = false;
  }
  return out + "\n  }\n}\n";
}

bool copy_side_file(const fs::path& from, const fs::path& to, std::string& error) {
  std::error_code ec;
  fs::create_directories(to.parent_path(), ec);
  MappedFile src;
  IoError err;
  if (!src.open(from.string(), err)) {
    error = err.message;
    return false;
  }
  AtomicOutput out(to.string());
  if (!out.open(error)) return false;
  std::vector<uint8_t> buf(1u << 20);
  for (uint64_t pos = 0; pos < src.size();) {
    uint64_t n = std::min<uint64_t>(buf.size(), src.size() - pos);
    if (!src.read_at(pos, std::span<uint8_t>(buf.data(), n), err)) {
      error = err.message;
      return false;
    }
    if (!out.write(buf.data(), n, error)) return false;
    pos += n;
  }
  return out.commit(error);
}

// ".<name>.tmp.<pid>": what AtomicOutput leaves behind when a run is killed.
bool is_stale_temp(const std::string& name) {
  auto pos = name.rfind(".tmp.");
  if (name.empty() || name[0] != '.' || pos == std::string::npos || pos + 5 >= name.size()) return false;
  return name.find_first_not_of("0123456789", pos + 5) == std::string::npos;
}

// ".<shard>.tmp.<pid>" or ".<shard>.json.tmp.<pid>" (its record) for one of `shards`.
bool temp_belongs_to(const std::string& temp, const std::vector<std::string>& shards) {
  std::string base = temp.substr(1, temp.rfind(".tmp.") - 1);
  if (base.ends_with(".json")) base.resize(base.size() - 5);
  return std::find(shards.begin(), shards.end(), base) != shards.end();
}

// Temporaries of an interrupted run never become outputs; remove them before resuming.
// A partition removes only the temporaries of its own shards and records: the other
// partitions may be writing theirs into the same OUT right now.
void remove_stale_temps(const std::string& out_dir, const std::vector<std::string>* only_for = nullptr) {
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) return;
  std::vector<fs::path> stale;
  for (auto it = fs::recursive_directory_iterator(out_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file(ec) && is_stale_temp(it->path().filename().string()) &&
        (!only_for || temp_belongs_to(it->path().filename().string(), *only_for)))
      stale.push_back(it->path());
  for (const auto& p : stale) fs::remove(p, ec);
}

uint64_t free_bytes(const fs::path& out) {
  fs::path probe = out;
  std::error_code ec;
  while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
  struct statvfs st {};
  if (::statvfs(probe.empty() ? "." : probe.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

uint64_t peak_rss() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

bool write_shards(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r,
                  const std::vector<bool>& done, const std::vector<bool>& owned) {
  uint64_t total = 0, written = 0;
  for (size_t i = 0; i < r.plan.shards.size(); ++i)
    if (owned[i] && !done[i]) total += r.plan.shards[i].file_bytes;
  ShardWriteOptions wo;
  wo.memory_budget = o.memory_budget;
  wo.on_progress = [&](uint64_t n) {
    written += n;
    if (o.progress) o.progress(written, total);
  };
  for (size_t i = 0; i < r.plan.shards.size(); ++i) {
    const PlannedShard& shard = r.plan.shards[i];
    if (!owned[i]) continue;  // another partition's
    if (done[i]) {
      ++r.shards_resumed;
      continue;
    }
    auto result = write_shard(in, r.plan, shard, (fs::path(o.output) / shard.name).string(), wo);
    if (result.status != WriteStatus::ok) {
      auto status = result.status == WriteStatus::input_error ? ConvertStatus::input_error : ConvertStatus::io_error;
      fail(r, status, status == ConvertStatus::io_error ? "IO_WRITE" : "CONVERT_DATA", shard.name, result.message);
      return false;
    }
    std::string error;
    result.record.partition_index = o.partition.index;
    result.record.partition_count = o.partition.count;
    if (!write_file_atomic(record_path(o.output, shard.name), record_json(result.record), error)) {
      fail(r, ConvertStatus::io_error, "IO_WRITE", shard.name, error);
      return false;
    }
    kill_point("shard record written");
    r.bytes_written += result.record.output_size;
    ++r.shards_written;
    for (const auto& [fused, stats] : result.remap_stats) r.remap_stats[fused].merge(stats);
  }
  return true;
}

bool write_side_files(const ConvertOptions& o, ConvertReport& r) {
  for (const auto& rel : r.plan.side_files) {
    std::string error;
    if (!copy_side_file(fs::path(o.input) / rel, fs::path(o.output) / rel, error)) {
      fail(r, ConvertStatus::io_error, "IO_WRITE", rel, "cannot copy " + rel + ": " + error);
      return false;
    }
  }
  return true;
}

// The index and config.json come last: a checkpoint that has them is complete.
bool write_index_and_config(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  std::string error;
  if (in.checkpoint.index.present || r.plan.shards.size() > 1) {
    if (!write_file_atomic((fs::path(o.output) / kIndexName).string(), index_json(r.plan), error)) {
      fail(r, ConvertStatus::io_error, "IO_WRITE", kIndexName, error);
      return false;
    }
    kill_point("index written");
  }
  if (!r.config_json.empty() &&
      !write_file_atomic((fs::path(o.output) / "config.json").string(), r.config_json, error)) {
    fail(r, ConvertStatus::io_error, "IO_WRITE", "config.json", error);
    return false;
  }
  return true;
}

void finish(ConvertReport& r, std::chrono::steady_clock::time_point start) {
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.peak_rss_bytes = peak_rss();
}

// --finalize: every shard verified first; only then the side files, index and config.
ConvertReport& finalize_output(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  if (!verify_partitioned_output(in, r.plan, o.output, o.partitions, r.finalize, r.findings)) {
    r.status = r.findings.has_io_errors() ? ConvertStatus::io_error : ConvertStatus::input_error;
    return r;
  }
  if (!o.dry_run && write_side_files(o, r)) write_index_and_config(in, o, r);  // --dry-run: check only
  return r;
}

}  // namespace

bool parse_size(const std::string& text, uint64_t& bytes) {
  if (text.empty()) return false;
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) return false;
  uint64_t value = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  int shift = unit.empty() || unit == "B" ? 0
              : (unit == "K" || unit == "KiB" || unit == "k") ? 10
              : (unit == "M" || unit == "MiB") ? 20
              : (unit == "G" || unit == "GiB") ? 30
              : (unit == "T" || unit == "TiB") ? 40 : -1;
  if (shift < 0 || value > (UINT64_MAX >> shift)) return false;
  bytes = value << shift;
  return true;
}

ConvertReport convert_checkpoint(const ConvertOptions& o) {
  auto start = std::chrono::steady_clock::now();
  ConvertReport r;
  r.dry_run = o.dry_run;
  if (o.memory_budget < (64ull << 20)) {
    fail(r, ConvertStatus::usage_error, "CONVERT_BUDGET", "", "--memory-budget must be at least 64M");
    return r;
  }
  if (!check_paths(o, r)) return r;
  LoadedModel in;
  if (!load_model(o.input, StReadOptions{}, in, r.findings) || r.findings.has_errors()) {
    r.status = r.findings.has_io_errors() ? ConvertStatus::io_error : ConvertStatus::input_error;
    r.findings.error("CONVERT_INPUT", o.input, "", std::nullopt,
                     "the input has structural errors (above); run `ckpt validate` on it and fix them first");
    return r;
  }
  if (!plan_conversion(in, o.experts, o.remap, r.plan, r.findings)) {
    r.status = ConvertStatus::input_error;
    return r;
  }
  if (!rewrite_input_config(in, r)) return r;
  if (o.finalize) {
    finalize_output(in, o, r);
    finish(r, start);
    return r;
  }

  // A partition converts only its own shards and always skips those already verified
  // (a resubmitted array task finishes the job); the final files are --finalize's.
  r.partition = o.partition;
  std::vector<bool> owned(r.plan.shards.size(), true);
  std::vector<std::string> owned_names;
  if (o.partition.active()) {
    r.shard_partition = shard_partitions(r.plan, o.partition.count);
    for (size_t i = 0; i < owned.size(); ++i) {
      owned[i] = r.shard_partition[i] == o.partition.index;
      if (owned[i]) owned_names.push_back(r.plan.shards[i].name);
    }
  }
  std::vector<bool> done(r.plan.shards.size(), false);
  if ((o.resume || (o.partition.active() && !o.overwrite)) && !o.dry_run)
    for (size_t i = 0; i < done.size(); ++i)
      done[i] = owned[i] && shard_already_done(in, r.plan.shards[i], o.output);
  r.disk_needed = o.partition.active() ? 0 : r.plan.side_bytes + r.config_json.size() + index_json(r.plan).size();
  for (size_t i = 0; i < done.size(); ++i)
    if (owned[i] && !done[i]) r.disk_needed += r.plan.shards[i].file_bytes;
  r.disk_free = free_bytes(o.output);
  if (o.dry_run) {
    finish(r, start);
    return r;
  }
  if (r.disk_needed > r.disk_free) {
    fail(r, ConvertStatus::io_error, "IO_NO_SPACE", o.output,
         "the conversion needs " + std::to_string(r.disk_needed) + " bytes but " + o.output + " has " +
             std::to_string(r.disk_free) + " free; nothing was written");
    return r;
  }
  remove_stale_temps(o.output, o.partition.active() ? &owned_names : nullptr);
  std::error_code ec;
  fs::create_directories(fs::path(record_path(o.output, "x")).parent_path(), ec);
  if (ec) return fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, "cannot create " + o.output + ": " + ec.message());
  kill_point("output directory created");
  if (o.partition.active())
    write_shards(in, o, r, done, owned);
  else if (write_side_files(o, r) && write_shards(in, o, r, done, owned))
    write_index_and_config(in, o, r);
  finish(r, start);
  return r;
}

}  // namespace ckpt
