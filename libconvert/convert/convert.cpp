#include "convert/convert.h"

#include <cerrno>

#include <cstring>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sys/statvfs.h>

#include "plan/config_rewrite.h"
#include "core/peak_rss.h"
#include "convert/finalize.h"
#include "convert/output_dir.h"
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

// OUT may not be IN, inside IN, or contain IN; a non-empty OUT needs --resume or --overwrite
// (or is shared by partitions); and an OUT holding a checkpoint ckptkit did not write is
// never written into, whatever the flags (IN and OUT swapped must not destroy the original).
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
  if (o.dry_run || !fs::is_directory(out, ec) || !out_has_content(o.output)) return true;
  auto found = checkpoint_files_in(o.output);
  if (!found.empty() && !is_ckptkit_output(o.output)) {
    std::string list;
    for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
    std::string swapped = is_ckptkit_output(o.input) ? "; the input " + o.input +
                                                           " is itself a ckptkit output: are IN and OUT swapped?"
                                                     : "";
    fail(r, ConvertStatus::usage_error, "CONVERT_OUTPUT_FOREIGN", o.output,
         o.output + " holds a checkpoint that ckptkit did not write (" + list + "; nothing in " + o.output +
             "/.ckptkit/ records it as a ckptkit output). --resume, --overwrite, --partition and --finalize only "
             "ever replace a previous ckptkit output" + swapped +
             "; choose an empty output directory (or remove that checkpoint yourself)");
    return false;
  }
  // Partitions share OUT (each writes only its own shards); --finalize completes it.
  bool shared_out = o.partition.active() || o.finalize;
  if (!o.resume && !o.overwrite && !shared_out) {
    fail(r, ConvertStatus::usage_error, "CONVERT_OUTPUT_NOT_EMPTY", o.output,
         o.output + " is not empty; pass --resume to finish an interrupted conversion or --overwrite to replace it");
    return false;
  }
  return true;
}

bool read_text(const std::string& path, std::string& text) {
  IoError err;
  return read_input_file(path, kMaxSideJsonBytes, text, err);
}

bool rewrite_input_config(const LoadedModel& in, ConvertReport& r) {
  if (!in.checkpoint.is_directory) return true;
  const bool config = in.checkpoint.config != nullptr;
  if (!config && !r.plan.rewrites_params_json) return true;
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
  cri.keep_quant_config_verbatim = r.plan.pairing.scheme.shape == ScaleShape::mxfp4_blocks &&
                                   r.plan.output_has_mxfp4_experts && r.plan.fused.empty();
  cri.tool_version = CKPT_VERSION;
  cri.source_structure_sha256 = r.plan.source_structure_sha256;
  std::string text, error;
  if (r.plan.rewrites_params_json) {  // Mistral native: params.json without its quantization section
    if (!read_text((fs::path(in.checkpoint.root) / "params.json").string(), text) ||
        !rewrite_params_json(text, cri, r.params_json, error)) {
      fail(r, ConvertStatus::input_error, "CFG_PARSE", "params.json", "cannot rewrite params.json: " + error);
      return false;
    }
  }
  if (!config || !read_text((fs::path(in.checkpoint.root) / "config.json").string(), text)) return true;
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
  if (!create_directories_durable(to.parent_path().string(), error)) return false;
  MappedFile src;
  IoError err;
  if (!src.open(from.string(), err)) {
    error = err.message;
    return false;
  }
  AtomicOutput out(to.string());
  if (!out.open(error)) return false;
  // The copy keeps the source's permission bits: a 0600 file stays 0600.
  if (::fchmod(out.fd(), src.mode() & 0777) != 0) {
    error = "cannot set the permissions of " + to.string() + ": " + std::strerror(errno);
    return false;
  }
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

uint64_t free_bytes(const fs::path& out) {
  fs::path probe = out;
  std::error_code ec;
  while (!probe.empty() && !fs::exists(probe, ec)) probe = probe.parent_path();
  struct statvfs st {};
  if (::statvfs(probe.empty() ? "." : probe.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

bool write_record(const ConvertOptions& o, ShardRecord& rec, ConvertReport& r) {
  rec.partition_index = o.partition.index;
  rec.partition_count = o.partition.count;
  std::string error;
  if (write_file_atomic(record_path(o.output, rec.shard), record_json(rec), error)) return true;
  fail(r, ConvertStatus::io_error, "IO_WRITE", rec.shard, error);
  return false;
}

// Each shard: its record in state "writing" first (OUT now says a ckptkit run owns that
// name, and an interrupted write is never trusted), the shard, then its finished record.
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
    ShardRecord rec = planned_record(in, r.plan, shard);
    if (!write_record(o, rec, r)) return false;
    auto result = write_shard(in, r.plan, shard, (fs::path(o.output) / shard.name).string(), wo);
    if (result.status != WriteStatus::ok) {
      auto status = result.status == WriteStatus::input_error ? ConvertStatus::input_error : ConvertStatus::io_error;
      fail(r, status, status == ConvertStatus::io_error ? "IO_WRITE" : "CONVERT_DATA", shard.name, result.message);
      return false;
    }
    std::string error;
    if (!finish_record(in, result, rec, error)) {
      fail(r, ConvertStatus::io_error, "CONVERT_INTERNAL", shard.name, error);
      return false;
    }
    if (!write_record(o, rec, r)) return false;
    kill_point("shard record written");
    r.bytes_written += result.output_size;
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

bool writes_index(const LoadedModel& in, const ConversionPlan& plan) {
  return in.checkpoint.index.present || plan.shards.size() > 1;
}

// Every file of OUT this plan produces (relative paths; .ckptkit/ aside).
std::set<std::string> planned_files(const LoadedModel& in, const ConvertReport& r) {
  std::set<std::string> files(r.plan.side_files.begin(), r.plan.side_files.end());
  for (const auto& s : r.plan.shards) files.insert(s.name);
  if (writes_index(in, r.plan)) files.insert(kIndexName);
  if (!r.config_json.empty()) files.insert("config.json");
  if (!r.params_json.empty()) files.insert("params.json");
  return files;
}

// The index and config.json come last: a checkpoint that has them is complete.
bool write_index_and_config(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  std::string error;
  if (writes_index(in, r.plan)) {
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
  if (!r.params_json.empty() &&
      !write_file_atomic((fs::path(o.output) / "params.json").string(), r.params_json, error)) {
    fail(r, ConvertStatus::io_error, "IO_WRITE", "params.json", error);
    return false;
  }
  return true;
}

void finish(ConvertReport& r, std::chrono::steady_clock::time_point start) {
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.peak_rss_bytes = peak_rss_bytes();
}

uint64_t disk_needed(const ConvertReport& r, const std::vector<bool>& owned, const std::vector<bool>& done,
                     const ConvertOptions& o) {
  uint64_t n = o.partition.active() ? 0 : r.plan.side_bytes + r.config_json.size() + r.params_json.size() + index_json(r.plan).size();
  for (size_t i = 0; i < done.size(); ++i)
    if (owned[i] && !done[i]) n += r.plan.shards[i].file_bytes;
  return n;
}

// OUT and its bookkeeping directories exist (made durable), and this run holds its locks:
// OUT's exclusively, or for a partition OUT's shared and its own shards' exclusively.
bool open_output(const ConvertOptions& o, const std::vector<std::string>* partition_shards, OutputLocks& locks,
                 ConvertReport& r) {
  std::string error;
  if (!create_directories_durable(records_dir(o.output), error)) {
    fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
    return false;
  }
  std::string what = "ckpt convert";
  if (o.partition.active()) what += " --partition " + o.partition.text();
  else if (o.finalize) what += " --finalize";
  else if (o.overwrite) what += " --overwrite";
  else if (o.resume) what += " --resume";
  switch (lock_output(o.output, partition_shards, what, locks, error)) {
    case LockResult::acquired: return true;
    case LockResult::busy: fail(r, ConvertStatus::usage_error, "CONVERT_OUTPUT_LOCKED", o.output, error); return false;
    case LockResult::error: fail(r, ConvertStatus::io_error, "IO_LOCK", o.output, error); return false;
  }
  return false;
}

// An index and config.json claim a complete output: they are removed before any shard of
// OUT changes, and written again only when every shard is right.
bool withdraw_completion(const ConvertOptions& o, ConvertReport& r) {
  std::string error;
  if (remove_output_files(o.output, {kIndexName, "config.json"}, error)) return true;
  fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
  return false;
}

// As rsync --delete, for files ckptkit wrote only. A whole-output run first lists in the
// manifest everything OUT may hold (an interruption still knows it), then removes the files
// and records of earlier runs that this plan does not produce. `rewrite` (--overwrite) also
// drops the records of the shards this run owns and rewrites. A partition never removes
// another's files: stale ones are --finalize's to remove.
bool prune_previous(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r, const std::vector<bool>& owned,
                    bool rewrite) {
  std::string error;
  const bool whole = !o.partition.active();
  std::set<std::string> planned = planned_files(in, r), before = files_written_before(o.output), rewritten;
  for (size_t i = 0; i < r.plan.shards.size(); ++i)
    if (owned[i] && rewrite) rewritten.insert(r.plan.shards[i].name);
  std::vector<std::string> gone, records;
  for (const auto& [path, shard] : records_in(o.output))
    if (rewritten.count(shard) || (whole && !planned.count(shard)))
      records.push_back(fs::path(path).lexically_relative(o.output).string());
  if (whole) {
    std::set<std::string> all = before;
    all.insert(planned.begin(), planned.end());
    if (!write_manifest(o.output, all, error)) return fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error), false;
    for (const auto& f : before)
      if (!planned.count(f)) gone.push_back(f);
  }
  for (const auto& f : gone)
    r.findings.info("CONVERT_REMOVED", f, "", std::nullopt,
                    f + " was written by an earlier conversion and is not part of this one: removed");
  gone.insert(gone.end(), records.begin(), records.end());  // the files before the records that name them
  if (!remove_output_files(o.output, gone, error)) return fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error), false;
  return true;
}

bool finish_manifest(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  std::string error;
  if (write_manifest(o.output, planned_files(in, r), error)) return true;
  fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
  return false;
}

// --finalize: every shard verified first; only then the side files, index and config.
ConvertReport& finalize_output(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  OutputLocks locks;  // a dry run only reads
  std::error_code ec;
  if (!o.dry_run && fs::is_directory(o.output, ec) && !open_output(o, nullptr, locks, r)) return r;
  if (!verify_partitioned_output(in, r.plan, o.output, o.partitions, r.finalize, r.findings)) {
    r.status = r.findings.has_io_errors() ? ConvertStatus::io_error : ConvertStatus::input_error;
    return r;
  }
  if (o.dry_run) return r;  // --dry-run: the check alone
  std::vector<bool> all(r.plan.shards.size(), true);
  if (prune_previous(in, o, r, all, false) && write_side_files(o, r) && write_index_and_config(in, o, r))
    finish_manifest(in, o, r);
  return r;
}

// Shards whose record proves them finished for this plan; the others are redone, and the
// reason is reported for every one that had a record.
std::vector<bool> finished_shards(const LoadedModel& in, const ConvertOptions& o, const std::vector<bool>& owned,
                                  ConvertReport& r) {
  std::vector<bool> done(r.plan.shards.size(), false);
  if (!(o.resume || (o.partition.active() && !o.overwrite))) return done;
  auto verdicts = verify_shards(in, r.plan, o.output, owned);
  for (size_t i = 0; i < done.size(); ++i) {
    if (!owned[i]) continue;
    done[i] = verdicts[i].state == ShardState::ok;
    if (!done[i] && verdicts[i].state != ShardState::missing)
      r.findings.info("CONVERT_SHARD_REDONE", r.plan.shards[i].name, "", std::nullopt,
                      "shard " + r.plan.shards[i].name + " is converted again: " + verdicts[i].detail);
  }
  return done;
}

// Locked, verified, space checked; then the claim of completeness withdrawn, earlier runs'
// leftovers pruned, and the shards (plus, for a whole-output run, side files, index, config).
void write_output(const LoadedModel& in, const ConvertOptions& o, const std::vector<bool>& owned,
                  const std::vector<std::string>& owned_names, ConvertReport& r) {
  OutputLocks locks;
  if (!open_output(o, o.partition.active() ? &owned_names : nullptr, locks, r)) return;
  kill_point("output directory created");
  if (o.partition.active()) {
    std::set<std::string> mine;
    for (const auto& name : owned_names) mine.insert({name, record_file_name(name)});
    remove_stale_temps(o.output, &mine);
  } else {
    remove_stale_temps(o.output);
  }
  std::vector<bool> done = finished_shards(in, o, owned, r);
  r.disk_needed = disk_needed(r, owned, done, o);
  if (r.disk_needed > r.disk_free) {
    fail(r, ConvertStatus::io_error, "IO_NO_SPACE", o.output,
         "the conversion needs " + std::to_string(r.disk_needed) + " bytes but " + o.output + " has " +
             std::to_string(r.disk_free) + " free; nothing was written");
    return;
  }
  if (o.on_plan) o.on_plan(r);
  bool writes_a_shard = false;
  for (size_t i = 0; i < done.size(); ++i) writes_a_shard |= owned[i] && !done[i];
  if ((!o.partition.active() || writes_a_shard) && !withdraw_completion(o, r)) return;
  if (!prune_previous(in, o, r, owned, o.overwrite)) return;
  if (o.partition.active())
    write_shards(in, o, r, done, owned);
  else if (write_side_files(o, r) && write_shards(in, o, r, done, owned) && (!o.before_finalize || o.before_finalize(r)) &&
           write_index_and_config(in, o, r))
    finish_manifest(in, o, r);
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
  r.disk_free = free_bytes(o.output);
  if (o.dry_run || (o.partition.active() && owned_names.empty())) {  // nothing to write
    r.disk_needed = disk_needed(r, owned, std::vector<bool>(owned.size(), false), o);
    std::string error;  // an empty partition still leaves OUT, as its siblings do
    if (!o.dry_run && !create_directories_durable(o.output, error)) fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
    finish(r, start);
    return r;
  }
  write_output(in, o, owned, owned_names, r);
  finish(r, start);
  return r;
}

}  // namespace ckpt
