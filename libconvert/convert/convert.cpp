#include "convert/convert.h"

#include <cerrno>

#include <cstring>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "plan/config_rewrite.h"
#include "plan/output_index.h"
#include "core/peak_rss.h"
#include "convert/finalize.h"
#include "convert/output_dir.h"
#include "convert/records.h"
#include "convert/shard_writer.h"
#include "formats/json.h"
#include "formats/model_files.h"
#include "io/atomic_file.h"
#include "io/free_space.h"
#include "io/hash.h"
#include "io/output_file.h"
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

bool check_out_contents(const ConvertOptions& o, ConvertReport& r);

// Every file convert creates in OUT is no more readable than IN's files (io/output_file.h).
mode_t output_mode_for(const std::string& input) {
  InputSet inputs;
  inputs.add_checkpoint(input);
  return inputs.output_mode();
}

// OUT may not be IN, inside IN, or contain IN, nor an existing file; then what OUT holds
// (check_out_contents), checked here only to refuse early, before IN is read and without
// creating anything in OUT: the check that decides is made again under OUT's lock.
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
  return check_out_contents(o, r);
}

// A non-empty OUT needs --resume or --overwrite (or is shared by partitions); an OUT holding
// a checkpoint ckptkit did not write is never written into, whatever the flags (IN and OUT
// swapped must not destroy the original).
bool check_out_contents(const ConvertOptions& o, ConvertReport& r) {
  std::error_code ec;
  if (o.dry_run || !fs::is_directory(o.output, ec) || !out_has_content(o.output)) return true;
  auto found = checkpoint_files_in(o.output);
  if (!found.empty() && !is_ckptkit_output(o.output)) {
    std::string list;
    for (const auto& f : found) list += std::string(list.empty() ? "" : ", ") + f;
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

// The bytes load_model parsed `name` from (formats/checkpoint.h config_texts): the plan and
// the rewrite see one read of the file; nullptr when it was not read.
const std::string* config_text_of(const LoadedModel& in, const std::string& name) {
  for (const auto& [file, text] : in.checkpoint.config_texts)
    if (file == name) return &text;
  return nullptr;
}

bool rewrite_input_config(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  if (!in.checkpoint.is_directory) return true;
  if (o.make_config) {  // ckpt relayout's own rewrite
    std::string error;
    if (!in.checkpoint.config || o.make_config(in, r.plan, r.config_json, error)) return true;
    fail(r, ConvertStatus::input_error, "CFG_PARSE", "config.json", "cannot rewrite config.json: " + error);
    return false;
  }
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
  std::string error;
  if (r.plan.rewrites_params_json) {  // Mistral native: params.json without its quantization section
    const std::string* params = config_text_of(in, "params.json");
    if (!params) error = "its bytes were not read with the plan";
    if (!params || !rewrite_params_json(*params, cri, r.params_json, error)) {
      fail(r, ConvertStatus::input_error, "CFG_PARSE", "params.json", "cannot rewrite params.json: " + error);
      return false;
    }
  }
  if (!config) return true;
  const std::string* config_text = config_text_of(in, "config.json");
  if (!config_text) error = "its bytes were not read with the plan";
  if (!config_text || !rewrite_config(*config_text, cri, r.config_json, error)) {
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

// A side file as the plan found it: the file its name led to then (the links the listing
// allows followed: inside IN, or a Hub cache blob) and which file that was (device, inode).
struct PinnedSideFile {
  std::string rel, path;
  dev_t dev = 0;
  ino_t ino = 0;
  struct timespec ctime {};  // a file created later at a reused inode number has another
};

bool same_file(const PinnedSideFile& pin, const struct stat& st) {
  return st.st_dev == pin.dev && st.st_ino == pin.ino && st.st_ctim.tv_sec == pin.ctime.tv_sec &&
         st.st_ctim.tv_nsec == pin.ctime.tv_nsec;
}

// Right after the plan: each side file's target, which must still be one the listing allows
// (formats/model_files.h), opened as an input (regular file, no symlink at the last step) and
// known from now on by (device, inode). A name replaced later, by a link to a secret outside
// IN or by another file, is then refused by copy_side_file instead of copied.
bool pin_side_files(const LoadedModel& in, ConvertReport& r, std::vector<PinnedSideFile>& pins) {
  for (const auto& rel : r.plan.side_files) {
    const fs::path named = fs::path(in.checkpoint.root) / rel;
    std::error_code ec;
    PinnedSideFile pin{rel, fs::weakly_canonical(named, ec).string()};
    if (ec || link_escapes_directory(in.checkpoint.root, pin.path)) {
      fail(r, ConvertStatus::input_error, "LINK_ESCAPE", rel, rel + " now leads outside the checkpoint; it is not read");
      return false;
    }
    IoError err;
    const int fd = open_input_fd(pin.path, err, InputLinks::refuse);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      if (fd >= 0) ::close(fd);
      fail(r, ConvertStatus::io_error, "IO_OPEN", rel, "cannot open " + rel + ": " + err.message);
      return false;
    }
    ::close(fd);
    pin.dev = st.st_dev;
    pin.ino = st.st_ino;
    pin.ctime = st.st_ctim;
    pins.push_back(std::move(pin));
  }
  return true;
}

// The pinned file, or a clear error: opened without following a link (O_NOFOLLOW), a regular
// file, and the very file the plan listed (same device and inode, and the same ctime: an
// inode number freed and reused by a new file is not the same file).
bool open_pinned(const PinnedSideFile& pin, MappedFile& src, std::string& error) {
  IoError err;
  if (!src.open(pin.path, err, InputLinks::refuse)) {
    error = err.message;
    return false;
  }
  struct stat st {};
  if (::fstat(src.fd(), &st) != 0 || !same_file(pin, st)) {
    error = pin.path + " is no longer the file the plan listed (device " + std::to_string(pin.dev) + ", inode " +
            std::to_string(pin.ino) + "): it was replaced during the conversion; it is not copied";
    return false;
  }
  return true;
}

bool copy_side_file(const PinnedSideFile& from, const fs::path& to, mode_t dir_mode, std::string& error) {
  if (!create_directories_durable(to.parent_path().string(), error, dir_mode)) return false;
  MappedFile src;
  IoError err;
  if (!open_pinned(from, src, error)) return false;
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

bool write_record(const ConvertOptions& o, ShardRecord& rec, ConvertReport& r) {
  rec.partition_index = o.partition.index;
  rec.partition_count = o.partition.count;
  std::string error;
  if (write_out_file(record_path(o.output, rec.shard), record_json(rec), r.output_mode, error)) return true;
  fail(r, ConvertStatus::io_error, "IO_WRITE", rec.shard, error);
  return false;
}

// Each shard: its record in state "writing" first (OUT now says a ckptkit run owns that
// name, and an interrupted write is never trusted), the shard, then its finished record.
// ConvertOptions::hash_inputs: the input shards in the order the conversion takes them
// (plan.shards[i] reads its own input file), then any input shard no output comes from.
std::unique_ptr<LockstepHasher> start_input_hashing(const LoadedModel& in, const ConversionPlan& plan) {
  const auto& shards = in.checkpoint.shards;
  std::vector<const InputFile*> files;
  std::vector<std::string> names;
  std::vector<bool> taken(shards.size(), false);
  auto take = [&](size_t k) {
    if (k >= shards.size() || taken[k]) return;
    taken[k] = true;
    files.push_back(&shards[k].file);
    names.push_back(shards[k].name);
  };
  for (const auto& s : plan.shards) take(s.input_file);
  for (size_t k = 0; k < shards.size(); ++k) take(k);
  return std::make_unique<LockstepHasher>(std::move(files), std::move(names));
}

// Every input shard hashed and unchanged since (r.input_sha256); otherwise a finding per
// file and OUT stays incomplete: the bytes converted may not be the bytes hashed.
bool finish_input_hashing(LockstepHasher& hasher, ConvertReport& r) {
  r.input_sha256 = hasher.finish();
  bool ok = true;
  for (const auto& h : r.input_sha256) {
    if (h.error.empty()) continue;
    const bool changed = h.error.find("changed") != std::string::npos;
    fail(r, changed ? ConvertStatus::input_error : ConvertStatus::io_error,
         changed ? "CONVERT_INPUT_CHANGED" : "IO_READ", h.name,
         "input shard " + h.name + ": " + h.error +
             "; the bytes converted may not be the bytes hashed, so OUT is left incomplete (shards written, no "
             "index, no config.json)");
    ok = false;
  }
  return ok;
}

// Every input shard still the file the conversion opened (InputFile::change_since_open):
// one written, resized or replaced while it was converted leaves OUT incomplete, as its
// shards may mix its old and new bytes. (With hash_inputs, finish_input_hashing checks it.)
bool inputs_unchanged(const LoadedModel& in, ConvertReport& r) {
  bool ok = true;
  for (const auto& shard : in.checkpoint.shards) {
    if (std::string why = shard.file.change_since_open(); !why.empty()) {
      fail(r, ConvertStatus::input_error, "CONVERT_INPUT_CHANGED", shard.name,
           "input shard " + shard.name + " changed while it was converted: " + why +
               "; OUT is left incomplete (shards written, no index, no config.json)");
      ok = false;
    }
  }
  return ok;
}

// `hasher` (may be null) is told which input shard the conversion is at.
bool write_shards(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r,
                  const std::vector<bool>& done, const std::vector<bool>& owned, LockstepHasher* hasher = nullptr) {
  uint64_t total = 0, written = 0;
  for (size_t i = 0; i < r.plan.shards.size(); ++i)
    if (owned[i] && !done[i]) total += r.plan.shards[i].file_bytes;
  ShardWriteOptions wo;
  wo.memory_budget = o.memory_budget;
  wo.mode = r.output_mode;
  wo.on_progress = [&](uint64_t n) {
    written += n;
    if (o.progress) o.progress(written, total);
  };
  for (size_t i = 0; i < r.plan.shards.size(); ++i) {
    const PlannedShard& shard = r.plan.shards[i];
    if (hasher) hasher->reached(i);  // its order is the plan's (start_input_hashing)
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

bool write_side_files(const ConvertOptions& o, const std::vector<PinnedSideFile>& pins, ConvertReport& r) {
  for (const auto& pin : pins) {
    std::string error;
    if (!copy_side_file(pin, fs::path(o.output) / pin.rel, output_directory_mode(r.output_mode), error)) {
      fail(r, ConvertStatus::io_error, "IO_WRITE", pin.rel, "cannot copy " + pin.rel + ": " + error);
      return false;
    }
  }
  return true;
}

// Every file of OUT this plan produces (relative paths; .ckptkit/ aside).
std::set<std::string> planned_files(const LoadedModel& in, const ConvertOptions& o, const ConvertReport& r) {
  std::set<std::string> files(r.plan.side_files.begin(), r.plan.side_files.end());
  files.insert(o.attestation_files.begin(), o.attestation_files.end());
  for (const auto& s : r.plan.shards) files.insert(s.name);
  if (plan_writes_index(in, r.plan)) files.insert(kIndexName);
  if (!r.config_json.empty()) files.insert("config.json");
  if (!r.params_json.empty()) files.insert("params.json");
  return files;
}

// The index and config.json come last: a checkpoint that has them is complete.
bool write_index_and_config(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  std::string error;
  if (plan_writes_index(in, r.plan)) {
    if (!write_out_file((fs::path(o.output) / kIndexName).string(), index_json(r.plan), r.output_mode, error)) {
      fail(r, ConvertStatus::io_error, "IO_WRITE", kIndexName, error);
      return false;
    }
    kill_point("index written");
  }
  if (!r.config_json.empty() &&
      !write_out_file((fs::path(o.output) / "config.json").string(), r.config_json, r.output_mode, error)) {
    fail(r, ConvertStatus::io_error, "IO_WRITE", "config.json", error);
    return false;
  }
  if (!r.params_json.empty() &&
      !write_out_file((fs::path(o.output) / "params.json").string(), r.params_json, r.output_mode, error)) {
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
  if (!create_directories_durable(o.output, error, output_directory_mode(r.output_mode))) {
    fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
    return false;
  }
  std::string what = o.command;
  if (o.partition.active()) what += " --partition " + o.partition.text();
  else if (o.finalize) what += " --finalize";
  else if (o.overwrite) what += " --overwrite";
  else if (o.resume) what += " --resume";
  switch (lock_output(o.output, partition_shards, what, locks, error)) {
    case LockResult::acquired:  // OUT/.ckptkit is now known to be a real directory (lock_output_dir)
      if (create_directories_durable(records_dir(o.output), error)) return true;
      fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
      return false;
    case LockResult::busy: fail(r, ConvertStatus::usage_error, "CONVERT_OUTPUT_LOCKED", o.output, error); return false;
    case LockResult::error: fail(r, ConvertStatus::io_error, "IO_LOCK", o.output, error); return false;
  }
  return false;
}

// The files of OUT this run writes: every planned file for a whole-output run or --finalize,
// a partition's own shards otherwise.
std::set<std::string> files_this_run_writes(const LoadedModel& in, const ConvertOptions& o, const std::vector<bool>& owned,
                                            const ConvertReport& r) {
  if (!o.partition.active()) return planned_files(in, o, r);
  std::set<std::string> files;
  for (size_t i = 0; i < r.plan.shards.size(); ++i)
    if (owned[i]) files.insert(r.plan.shards[i].name);
  return files;
}

// The files that claim a complete output: removed first, written last (a signed
// conversion's bundle and provenance, sign/provenance.h, after them).
const char* const kCompletionMarkers[] = {kIndexName, "config.json", "params.json", "model.sig", "model.provenance"};

// The files of OUT that earlier ckptkit runs wrote (convert/output_dir.h). OUT without a
// manifest but with records (0.1.0, or partitions not finalized yet) also counts the index
// and config.json as ckptkit's: a 0.1.0 run wrote them, and listed them nowhere.
std::set<std::string> ckptkit_files(const std::string& out) {
  std::set<std::string> files = files_written_before(out);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(manifest_path(out), ec)) && is_ckptkit_output(out))
    files.insert({kIndexName, "config.json"});
  return files;
}

// A file at a name this run writes that no earlier ckptkit run wrote (neither the manifest
// nor a record names it: your own tokenizer.json, say) is never replaced: the run is refused
// before anything is written, naming it (docs/ckpt-convert.md "--overwrite").
bool keeps_user_files(const LoadedModel& in, const ConvertOptions& o, const std::vector<bool>& owned, ConvertReport& r) {
  const std::set<std::string> before = ckptkit_files(o.output);
  std::vector<std::string> theirs;
  for (const auto& rel : files_this_run_writes(in, o, owned, r)) {
    std::error_code ec;
    if (!before.count(rel) && fs::exists(fs::symlink_status(fs::path(o.output) / rel, ec))) theirs.push_back(rel);
  }
  if (theirs.empty()) return true;
  std::string list;
  for (size_t i = 0; i < theirs.size() && i < 3; ++i) list += (i ? ", " : "") + theirs[i];
  if (theirs.size() > 3) list += " and " + std::to_string(theirs.size() - 3) + " more";
  fail(r, ConvertStatus::usage_error, "CONVERT_OUTPUT_USER_FILE", o.output,
       o.output + " holds " + list + ", which this conversion writes but ckptkit did not write (" + o.output +
           "/.ckptkit/ does not list it); a file ckptkit did not write is never replaced: move it away, or choose "
           "another output directory");
  return false;
}

// Under OUT's lock, before anything is written, the checks that decide whether this run
// may write OUT (made before the lock they could be stale: another run may have written OUT
// in between): what OUT holds, its state files, and files ckptkit did not write.
bool check_locked_output(const LoadedModel& in, const ConvertOptions& o, const std::vector<bool>& owned,
                         ConvertReport& r) {
  if (!check_out_contents(o, r)) return false;
  if (std::string why = state_files_problem(o.output); !why.empty()) {
    fail(r, ConvertStatus::io_error, "IO_NOT_REGULAR", o.output, why);
    return false;
  }
  return keeps_user_files(in, o, owned, r);
}

// The files that claim a complete output (the index, config.json, Mistral's params.json),
// as far as ckptkit wrote them, are removed before any file of OUT changes, and written again
// only when every shard is right. (One ckptkit did not write is kept: keeps_user_files.)
bool withdraw_completion(const ConvertOptions& o, ConvertReport& r) {
  std::string error;
  const std::set<std::string> ours = ckptkit_files(o.output);
  std::vector<std::string> markers;
  for (const char* m : kCompletionMarkers)
    if (ours.count(m)) markers.push_back(m);
  if (remove_output_files(o.output, markers, error)) return true;
  fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
  return false;
}

// As rsync --delete, for files ckptkit wrote only. A whole-output run first lists in the
// manifest everything OUT may hold (an interruption still knows it), then removes the files
// and records of earlier runs that this plan does not produce. The records of the shards
// this run rewrites stay until each is replaced by its "writing" record (an interrupted
// partition still knows its shards as ckptkit's). A partition never removes another's
// files: stale ones are --finalize's to remove.
bool prune_previous(const LoadedModel& in, const ConvertOptions& o, ConvertReport& r) {
  std::string error;
  const bool whole = !o.partition.active();
  std::set<std::string> planned = planned_files(in, o, r), before = files_written_before(o.output);
  std::vector<std::string> gone, records;
  for (const auto& [path, shard] : records_in(o.output))
    if (whole && !planned.count(shard))
      records.push_back(fs::path(path).lexically_relative(o.output).string());
  if (whole) {
    std::set<std::string> all = before;
    all.insert(planned.begin(), planned.end());
    if (!write_manifest(o.output, all, r.output_mode, error)) return fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error), false;
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
  if (write_manifest(o.output, planned_files(in, o, r), r.output_mode, error)) return true;
  fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
  return false;
}

// --finalize: every shard verified first; only then the side files, index and config.
ConvertReport& finalize_output(const LoadedModel& in, const ConvertOptions& o, const std::vector<PinnedSideFile>& pins,
                               ConvertReport& r) {
  OutputLocks locks;  // a dry run only reads
  std::error_code ec;
  std::vector<bool> all(r.plan.shards.size(), true);
  if (!o.dry_run && fs::is_directory(o.output, ec) &&
      (!open_output(o, nullptr, locks, r) || !check_locked_output(in, o, all, r)))
    return r;
  if (!verify_partitioned_output(in, r.plan, o.output, o.partitions, r.finalize, r.findings)) {
    r.status = r.findings.has_io_errors() ? ConvertStatus::io_error : ConvertStatus::input_error;
    return r;
  }
  if (o.dry_run) return r;  // --dry-run: the check alone
  if (withdraw_completion(o, r) && prune_previous(in, o, r) && write_side_files(o, pins, r) &&
      write_index_and_config(in, o, r) && finish_manifest(in, o, r) && o.after_finalize)
    o.after_finalize(r);
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
                  const std::vector<std::string>& owned_names, const std::vector<PinnedSideFile>& pins,
                  ConvertReport& r) {
  OutputLocks locks;
  if (!open_output(o, o.partition.active() ? &owned_names : nullptr, locks, r) || !check_locked_output(in, o, owned, r))
    return;
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
  r.disk_free = free_bytes(o.output);  // again, under the lock: the plan's figure may be stale
  if (std::string no_space = no_space_message("the conversion", r.disk_needed, o.output, r.disk_free);
      !no_space.empty()) {
    fail(r, ConvertStatus::io_error, "IO_NO_SPACE", o.output, no_space);
    return;
  }
  if (o.on_plan) o.on_plan(r);
  bool writes_a_shard = false;
  for (size_t i = 0; i < done.size(); ++i) writes_a_shard |= owned[i] && !done[i];
  if ((!o.partition.active() || writes_a_shard) && !withdraw_completion(o, r)) return;
  if (!prune_previous(in, o, r)) return;
  // Declared after `in`'s files are open and destroyed before they close (it reads them).
  std::unique_ptr<LockstepHasher> hasher;
  if (o.hash_inputs && !o.partition.active()) hasher = start_input_hashing(in, r.plan);
  if (o.partition.active())
    write_shards(in, o, r, done, owned);
  else if (write_side_files(o, pins, r) && write_shards(in, o, r, done, owned, hasher.get()) &&
           (hasher ? finish_input_hashing(*hasher, r) : inputs_unchanged(in, r)) &&
           (!o.before_finalize || o.before_finalize(r)) && write_index_and_config(in, o, r) &&
           finish_manifest(in, o, r) && o.after_finalize)
    o.after_finalize(r);
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
  if (!(o.make_plan ? o.make_plan(in, r.plan, r.findings) : plan_conversion(in, o.experts, o.remap, r.plan, r.findings))) {
    r.status = ConvertStatus::input_error;
    return r;
  }
  stop_point("planned, output not locked");
  if (!rewrite_input_config(in, o, r)) return r;
  r.output_mode = output_mode_for(o.input);
  std::vector<PinnedSideFile> pins;  // partitions copy no side files
  if (!o.dry_run && !o.partition.active() && !pin_side_files(in, r, pins)) return r;
  if (o.finalize) {
    finalize_output(in, o, pins, r);
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
  r.disk_free = free_bytes(o.output);  // for the report; measured again under the lock
  if (o.dry_run || (o.partition.active() && owned_names.empty())) {  // nothing to write
    r.disk_needed = disk_needed(r, owned, std::vector<bool>(owned.size(), false), o);
    std::string error;  // an empty partition still leaves OUT, as its siblings do
    if (!o.dry_run && !create_directories_durable(o.output, error, output_directory_mode(r.output_mode))) fail(r, ConvertStatus::io_error, "IO_WRITE", o.output, error);
    finish(r, start);
    return r;
  }
  write_output(in, o, owned, owned_names, pins, r);
  finish(r, start);
  return r;
}

}  // namespace ckpt
