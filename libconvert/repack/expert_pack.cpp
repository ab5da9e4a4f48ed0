#include "repack/expert_pack.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "core/build_info.h"
#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "io/atomic_file.h"
#include "io/free_space.h"
#include "io/hash.h"
#include "io/mapped_file.h"
#include "io/output_file.h"
#include "io/output_lock.h"
#include "formats/json_writer.h"

namespace ckpt {

float a_log_from_ssm_a(float ssm_a) {
  // One rounding: log in double is (nearly always) correctly rounded and has 29 spare bits.
  return static_cast<float>(std::log(-static_cast<double>(ssm_a)));
}

namespace {

namespace fs = std::filesystem;

// Bounded memory: one copy buffer for the expert/dense stream, one window for the SHA-256,
// and the SHA-256 tree's 1 MiB read block per tbb worker.
constexpr size_t kCopyBufferBytes = 16u << 20;
constexpr size_t kHashWindowBytes = 8u << 20;
// How far ahead of the copy the kernel is asked to read (posix_fadvise WILLNEED).
constexpr uint64_t kReadAheadBytes = 64u << 20;

// Blob part order: an expert's gate rows, then up (or the fused gate_up), then down.
constexpr const char* kExpertRoles[] = {"gate", "up", "gate_up", "down"};

struct ExpertPart {
  const GgufTensorInfo* tensor = nullptr;
  std::string role;
  uint64_t stride = 0;       // bytes of one expert's slice (ggml nb[2])
  uint64_t data_offset = 0;  // absolute file offset of expert 0
};

struct ExpertLayer {
  uint64_t layer = 0, experts = 0;
  std::vector<ExpertPart> parts;
  uint64_t blob_size = 0, blob_stride = 0;
  uint64_t first_blob_offset = 0;  // in experts.bin
};

struct PartRecord {
  uint64_t offset_in_blob = 0, size = 0, source_offset = 0, xxh3 = 0;
};

struct BlobRecord {
  uint64_t layer = 0, expert = 0, offset = 0, size = 0;
  std::vector<PartRecord> parts;  // in layer.parts order
};

// "blk.<N>.<rest>" -> N and rest; false for anything else.
bool parse_block_name(const std::string& name, uint64_t& layer, std::string& rest) {
  if (name.rfind("blk.", 0) != 0) return false;
  size_t i = 4;
  uint64_t n = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i < 4 + 9) n = n * 10 + static_cast<uint64_t>(name[i++] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.') return false;
  layer = n;
  rest = name.substr(i + 1);
  return true;
}

// The expert role of "blk.N.ffn_<role>_exps.weight", or "".
std::string expert_role(const std::string& rest) {
  for (const char* role : kExpertRoles) {
    if (rest == std::string("ffn_") + role + "_exps.weight") return role;
  }
  return "";
}

bool is_ssm_a(const GgufTensorInfo& t, uint64_t& layer) {
  std::string rest;
  return parse_block_name(t.name, layer, rest) && rest == "ssm_a";
}

bool is_a_log(const GgufTensorInfo& t) {
  uint64_t layer = 0;
  std::string rest;
  return parse_block_name(t.name, layer, rest) && rest == "A_log";
}

// 56320 -> "56,320": numbers in reasons read the way the spec writes them.
std::string with_commas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string float_text(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0.0f) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// Why the A_log recovery rejects a value, or nullptr when log(−v) is finite.
const char* a_log_rejection(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return "infinite";
  if (v == 0.0f) return std::signbit(v) ? "negative zero (log(0) = -inf)" : "zero (log(0) = -inf)";
  if (v > 0.0f) return "positive (ssm_a = -exp(A_log) must be < 0)";
  return nullptr;
}

class RepackJob {
 public:
  RepackJob(const std::string& in, const std::string& out_dir, const RepackOptions& options, RepackReport& report)
      : in_(in), out_dir_(out_dir), options_(options), r_(report) {}

  void run();

 private:
  // Each step returns false after recording why (finding + status).
  bool check_options();
  bool check_out_dir();
  bool create_out_dir();
  bool lock_out_dir();
  bool withdraw_manifest();
  bool check_free_space(uint64_t dense_data);
  bool open_input();
  bool plan_experts();
  bool add_expert_tensor(const GgufTensorInfo& t, uint64_t layer, const std::string& role,
                         std::map<uint64_t, ExpertLayer>& layers);
  bool check_expert_layer(ExpertLayer& layer);
  bool layout_blobs();
  bool require_experts();
  bool plan_a_log();
  bool scan_ssm_a(const GgufTensorInfo& t);
  void start_source_hash();
  void hash_source();
  void hash_source_tree();
  bool finish_source_hash();
  bool write_experts(AtomicOutput& out);
  bool copy_part(AtomicOutput& out, uint64_t src, uint64_t len, Xxh3& hash);
  bool stage_zeros(AtomicOutput& out, uint64_t n);
  bool flush(AtomicOutput& out);
  bool end_writes(AtomicOutput& out);
  void read_ahead(const ExpertLayer& layer, uint64_t first_expert, uint64_t count) const;
  bool write_dense(AtomicOutput& out);
  bool plan_dense(GgufWriter& w);
  bool stream_dense_tensor(GgufWriter& w, AtomicOutput& out, const GgufTensorInfo& t, bool fix);
  bool write_manifest();
  std::string manifest_json() const;
  bool output_is_input(const std::string& path) const;
  void add_progress(uint64_t bytes);

  bool fail(int status, const std::string& code, const std::string& file, const std::string& tensor,
            std::optional<uint64_t> offset, const std::string& message) {
    r_.findings.error(code, file, tensor, offset, message);
    if (r_.status == kRepackOk) r_.status = status;
    return false;
  }
  bool io_fail(const std::string& code, const std::string& file, const std::string& message) {
    return fail(kRepackIoError, code, file, "", std::nullopt, message);
  }

  std::string in_, out_dir_;
  mode_t mode_ = kOutputFileMode;  // of every output: never more readable than the input
  FileLock lock_;                  // OUT_DIR's, from the check that decides to the last rename
  const RepackOptions& options_;
  RepackReport& r_;
  MappedFile src_;
  std::optional<GgufFile> g_;
  std::vector<ExpertLayer> layers_;
  std::vector<BlobRecord> blobs_;
  std::vector<const GgufTensorInfo*> dense_;  // source order
  bool fix_a_log_ = false;                    // this run rewrites ssm_a
  uint64_t experts_size_ = 0, total_work_ = 0, done_work_ = 0;
  std::atomic<uint64_t> hashed_{0};  // by both source hashes (progress)
  // Staging buffer for experts.bin: parts are read straight into it and written in big chunks.
  std::unique_ptr<uint8_t[]> buf_;
  size_t buf_fill_ = 0;
  uint64_t written_ = 0;
  // SHA-256 of the whole source, computed by a second thread while the copy runs, and its
  // SHA-256 tree, computed by a third one on the other cores (oneTBB).
  std::vector<uint8_t> dense_buf_;
  std::thread hash_thread_, tree_thread_;
  std::atomic<bool> hash_stop_{false};
  std::atomic<int> hashes_running_{0};
  std::string hash_error_, tree_error_;
  std::vector<Sha256Digest> tree_chunks_;
  Sha256Digest tree_root_{};
};

bool RepackJob::check_options() {
  const uint64_t a = options_.align;
  if (!is_power_of_two(a) || a < kRepackMinAlign || a > kRepackMaxAlign) {
    return fail(kRepackUsage, "REPACK_BAD_ALIGN", "", "", std::nullopt,
                "--align " + std::to_string(a) + " is not a power of two between " + std::to_string(kRepackMinAlign) +
                    " and " + std::to_string(kRepackMaxAlign));
  }
  if (!options_.source_sha256 && options_.tree_chunk == 0) {
    return fail(kRepackUsage, "REPACK_NO_SOURCE_IDENTITY", "", "", std::nullopt,
                "--tree-chunk 0 without --source-sha256 leaves the manifest without its source's identity: keep "
                "the tree or ask for the whole-file SHA-256");
  }
  if (options_.tree_chunk != 0 && !sha256_tree_chunk_size_ok(options_.tree_chunk)) {
    return fail(kRepackUsage, "REPACK_BAD_TREE_CHUNK", "", "", std::nullopt,
                "--tree-chunk " + std::to_string(options_.tree_chunk) + " is not 0 or a power of two between " +
                    std::to_string(kSha256TreeMinChunk) + " and " + std::to_string(kSha256TreeMaxChunk));
  }
  return true;
}

// Before reading anything: OUT_DIR is absent, empty, or --overwrite was given.
bool RepackJob::check_out_dir() {
  std::error_code ec;
  auto st = fs::status(out_dir_, ec);
  if (fs::exists(st) && !fs::is_directory(st)) {
    return fail(kRepackUsage, "REPACK_OUT_NOT_DIR", out_dir_, "", std::nullopt, out_dir_ + " exists and is not a directory");
  }
  if (fs::exists(st) && !options_.overwrite && !output_dir_is_empty(out_dir_)) {
    return fail(kRepackUsage, "REPACK_OUT_NOT_EMPTY", out_dir_, "", std::nullopt,
                "output directory " + out_dir_ + " is not empty (use --overwrite to replace its pack)");
  }
  for (const char* name : {kPackExpertsFile, kPackDenseFile, kPackManifestFile}) {
    if (output_is_input((fs::path(out_dir_) / name).string())) {
      return fail(kRepackUsage, "REPACK_OUT_IS_INPUT", in_, "", std::nullopt,
                  "refusing to overwrite the input " + in_ + " with the output " + name);
    }
  }
  return true;
}

// After the input checked out, so a rejected input leaves no directory behind.
bool RepackJob::create_out_dir() {
  // Durable: every directory created has its parent fsynced, as convert's OUT has.
  std::string error;
  if (!create_directories_durable(out_dir_, error, output_directory_mode(mode_)))
    return io_fail("IO_CREATE", out_dir_, "cannot create " + out_dir_ + ": " + error);
  return true;
}

// OUT_DIR's lock (io/output_lock.h), then the check of what OUT_DIR holds made again: the
// one before the input was read only refused early; this one, under the lock, decides.
bool RepackJob::lock_out_dir() {
  std::string holder;
  switch (lock_output_dir(out_dir_, FileLock::Mode::exclusive, "ckpt repack-experts", lock_, holder,
                          output_directory_mode(mode_))) {
    case FileLock::Result::acquired: return check_out_dir();
    case FileLock::Result::busy:
      return fail(kRepackUsage, "REPACK_OUT_LOCKED", out_dir_, "", std::nullopt,
                  output_dir_busy_message(out_dir_, holder));
    case FileLock::Result::error: return io_fail("IO_LOCK", out_dir_, holder);
  }
  return false;
}

// The manifest marks a finished pack: an old one (--overwrite) is removed, durably, before
// anything of OUT_DIR changes, so an interruption never pairs it with other data files.
bool RepackJob::withdraw_manifest() {
  // A signed pack's bundle and provenance (sign/provenance.h) claim it finished too.
  for (const char* name : {kPackManifestFile, "model.sig", "model.provenance"}) {
    const std::string path = (fs::path(out_dir_) / name).string();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return io_fail("IO_WRITE", path, "cannot remove the old " + path + ": " + std::strerror(errno));
  }
  std::string error;
  if (!sync_directory(out_dir_, error)) return io_fail("IO_WRITE", out_dir_, error);
  return true;
}

// Under the lock, before anything is written: the data files' bytes (experts.bin, and
// dense.gguf's tensor data; its header and the manifest are small) fit on OUT_DIR's disk.
// An --overwrite run's old data files still count as used: they are replaced at the renames.
bool RepackJob::check_free_space(uint64_t dense_data) {
  const uint64_t needed = experts_size_ + dense_data;
  const std::string no_space = no_space_message("the repack", needed, out_dir_, free_bytes(out_dir_));
  return no_space.empty() || io_fail("IO_NO_SPACE", out_dir_, no_space);
}

bool RepackJob::output_is_input(const std::string& path) const {
  std::error_code ec;
  return fs::exists(path, ec) && fs::equivalent(path, in_, ec);
}

bool RepackJob::open_input() {
  IoError err;
  if (!src_.open(in_, err)) return io_fail("IO_OPEN", in_, "cannot read " + in_ + ": " + err.message);
  r_.source_bytes = src_.size();
  g_ = read_gguf(src_, in_, r_.findings);
  if (!g_ || r_.findings.has_errors()) {
    if (r_.status == kRepackOk) r_.status = kRepackInputError;
    r_.findings.error("REPACK_BAD_INPUT", in_, "", std::nullopt, in_ + " is not a valid GGUF file (see the findings above)");
    return false;
  }
  return true;
}

bool RepackJob::add_expert_tensor(const GgufTensorInfo& t, uint64_t layer, const std::string& role,
                                  std::map<uint64_t, ExpertLayer>& layers) {
  if (t.n_dims != 3 || t.ne[2] == 0 || t.nbytes == 0) {
    return fail(kRepackInputError, "REPACK_EXPERT_SHAPE", in_, t.name, t.info_offset,
                "expert tensor '" + t.name + "' has " + std::to_string(t.n_dims) + " dims and " +
                    std::to_string(t.ne[2]) + " experts, expected 3 dims {cols, rows, n_expert} with n_expert >= 1");
  }
  ExpertPart p;
  p.tensor = &t;
  p.role = role;
  // nbytes = row_bytes * ne1 * ne2 exactly (ne3 = 1), so this is nb[2].
  p.stride = t.nbytes / t.ne[2];
  auto abs = checked_add(g_->data_start, t.offset);
  if (!abs) return fail(kRepackInputError, "REPACK_EXPERT_SHAPE", in_, t.name, t.info_offset, "offset overflows");
  p.data_offset = *abs;
  auto& l = layers[layer];
  l.layer = layer;
  l.parts.push_back(p);
  return true;
}

// All parts of a layer agree on the expert count (and the file's expert_count, when set).
bool RepackJob::check_expert_layer(ExpertLayer& l) {
  auto rank = [](const std::string& role) {
    for (size_t i = 0; i < std::size(kExpertRoles); ++i) if (role == kExpertRoles[i]) return i;
    return std::size(kExpertRoles);
  };
  std::sort(l.parts.begin(), l.parts.end(), [&](const ExpertPart& a, const ExpertPart& b) { return rank(a.role) < rank(b.role); });
  l.experts = l.parts.front().tensor->ne[2];
  for (const auto& p : l.parts) {
    if (p.tensor->ne[2] != l.experts) {
      return fail(kRepackInputError, "REPACK_EXPERT_COUNT", in_, p.tensor->name, p.tensor->info_offset,
                  "'" + p.tensor->name + "' holds " + std::to_string(p.tensor->ne[2]) + " experts but '" +
                      l.parts.front().tensor->name + "' holds " + std::to_string(l.experts));
    }
  }
  auto arch = g_->get_string("general.architecture");
  auto declared = arch ? g_->get_int(*arch + ".expert_count") : std::nullopt;
  if (declared && (*declared < 0 || static_cast<uint64_t>(*declared) != l.experts)) {
    return fail(kRepackInputError, "REPACK_EXPERT_COUNT", in_, l.parts.front().tensor->name, std::nullopt,
                *arch + ".expert_count is " + std::to_string(*declared) + " but layer " + std::to_string(l.layer) +
                    " stores " + std::to_string(l.experts) + " experts");
  }
  return true;
}

bool RepackJob::plan_experts() {
  std::map<uint64_t, ExpertLayer> layers;  // ordered by layer number
  for (const auto& t : g_->tensors) {
    uint64_t layer = 0;
    std::string rest;
    std::string role = parse_block_name(t.name, layer, rest) ? expert_role(rest) : "";
    if (role.empty()) {
      dense_.push_back(&t);
    } else if (!add_expert_tensor(t, layer, role, layers)) {
      return false;
    }
  }
  for (auto& [n, l] : layers) {
    if (!check_expert_layer(l)) return false;
    layers_.push_back(std::move(l));
  }
  return layout_blobs();
}

// Blob sizes, padded strides and the reasons the source layout needed a repack.
bool RepackJob::layout_blobs() {
  const uint64_t a = options_.align;
  uint64_t pos = 0;
  for (auto& l : layers_) {
    RepackLayerStats stats;
    stats.layer = l.layer;
    stats.experts = l.experts;
    uint64_t blob = 0;
    for (const auto& p : l.parts) {
      auto sum = checked_add(blob, p.stride);
      if (!sum) return fail(kRepackInputError, "REPACK_EXPERT_SHAPE", in_, p.tensor->name, std::nullopt, "blob size overflows");
      blob = *sum;
      const std::string type = ggml_type_name(p.tensor->type);
      stats.parts.push_back({p.tensor->name, p.role, type, p.stride, p.stride % a == 0});
      if (p.stride % a != 0) {
        stats.reasons.push_back(type + " " + p.role + " stride " + with_commas(p.stride) + " B is not a multiple of " +
                                std::to_string(a));
      }
      if (p.data_offset % a != 0) {
        stats.reasons.push_back(p.role + " data starts at file offset " + with_commas(p.data_offset) +
                                ", not a multiple of " + std::to_string(a));
      }
    }
    if (l.parts.size() > 1) {
      stats.reasons.push_back("an expert's " + std::to_string(l.parts.size()) +
                              " slices lie in separate tensors; a blob makes them one contiguous read");
    }
    auto stride = checked_pad(blob, a);
    auto bytes = stride ? checked_mul(*stride, l.experts) : std::nullopt;
    auto end = bytes ? checked_add(pos, *bytes) : std::nullopt;
    if (!end) return fail(kRepackInputError, "REPACK_EXPERT_SHAPE", in_, "", std::nullopt, "experts.bin size overflows");
    l.blob_size = stats.blob_size = blob;
    l.blob_stride = stats.blob_stride = *stride;
    l.first_blob_offset = pos;
    pos = *end;
    r_.blobs += l.experts;
    r_.padding_bytes += (*stride - blob) * l.experts;
    r_.layers.push_back(std::move(stats));
  }
  experts_size_ = pos;
  r_.experts_bytes = pos;
  return true;
}

// After plan_a_log(), so a second --a-log fix on a dense.gguf is reported as such.
bool RepackJob::require_experts() {
  if (!layers_.empty()) return true;
  return fail(kRepackInputError, "REPACK_NO_EXPERTS", in_, "", std::nullopt,
              in_ + " has no blk.N.ffn_{gate,up,gate_up,down}_exps.weight tensors: nothing to repack");
}

bool RepackJob::plan_a_log() {
  std::string marker = g_->get_string(kRepackALogKey).value_or("");
  bool has_ssm_a = false, has_a_log = false;
  for (const auto* t : dense_) {
    uint64_t layer = 0;
    has_ssm_a |= is_ssm_a(*t, layer);
    has_a_log |= is_a_log(*t);
  }
  const bool already_fixed = marker == "fixed" || (!has_ssm_a && has_a_log);
  r_.a_log = already_fixed ? "fixed" : "kept";
  if (!options_.fix_a_log) return true;
  if (already_fixed) {
    return fail(kRepackInputError, "REPACK_A_LOG_ALREADY_FIXED", in_, "", std::nullopt,
                in_ + " already holds A_log (" +
                    (marker == "fixed" ? std::string(kRepackALogKey) + " = \"fixed\"" : "blk.N.A_log and no blk.N.ssm_a") +
                    "); refusing to apply log(-x) twice (use --a-log keep)");
  }
  bool ok = true;
  for (const auto* t : dense_) {
    uint64_t layer = 0;
    if (!is_ssm_a(*t, layer)) continue;
    const std::string target = "blk." + std::to_string(layer) + ".A_log";
    if (g_->find_tensor(target) != nullptr) {
      ok = fail(kRepackInputError, "REPACK_A_LOG_EXISTS", in_, t->name, t->info_offset,
                "'" + t->name + "' would become '" + target + "', which already exists");
      continue;
    }
    ok = scan_ssm_a(*t) && ok;
    ++r_.a_log_tensors;
  }
  fix_a_log_ = has_ssm_a;
  if (fix_a_log_) r_.a_log = "fixed";
  return ok;
}

// Fail-closed check of every value before anything is written: log(−x) must be finite.
bool RepackJob::scan_ssm_a(const GgufTensorInfo& t) {
  if (t.type != kGgmlF32) {
    return fail(kRepackInputError, "REPACK_A_LOG_TYPE", in_, t.name, t.info_offset,
                "'" + t.name + "' is " + ggml_type_name(t.type) + ", expected F32 (-exp(A_log) as written by the converter)");
  }
  const uint64_t start = g_->data_start + t.offset;  // in the file: read_gguf reported no bounds errors
  std::vector<float> chunk(kCopyBufferBytes / sizeof(float) / 16);
  const uint64_t count = t.nbytes / sizeof(float);
  for (uint64_t first = 0; first < count; first += chunk.size()) {
    const uint64_t n = std::min<uint64_t>(chunk.size(), count - first);
    IoError err;
    std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(chunk.data()), static_cast<size_t>(n * sizeof(float)));
    if (!src_.read_at(start + first * sizeof(float), bytes, err)) return io_fail("IO_READ", in_, err.message);
    for (uint64_t i = 0; i < n; ++i) {
      if (const char* why = a_log_rejection(chunk[i])) {
        return fail(kRepackInputError, "REPACK_A_LOG_VALUE", in_, t.name, start + (first + i) * sizeof(float),
                    "'" + t.name + "' element " + std::to_string(first + i) + " is " + float_text(chunk[i]) + ", " +
                        why + ": A_log = log(-ssm_a) needs every value finite and < 0");
      }
    }
  }
  return true;
}

void RepackJob::start_source_hash() {
  hashes_running_ = (options_.source_sha256 ? 1 : 0) + (options_.tree_chunk != 0 ? 1 : 0);
  if (options_.source_sha256) {
    hash_thread_ = std::thread([this] {
      hash_source();
      --hashes_running_;
    });
  }
  if (options_.tree_chunk == 0) return;
  tree_thread_ = std::thread([this] {
    hash_source_tree();
    --hashes_running_;
  });
}

// Runs on the tree thread (its tasks on the tbb workers); touches only hashed_, tree_error_,
// tree_chunks_, tree_root_ and r_.source_tree_root, which the main thread reads after join(). Its chunks go
// front to back, ahead of the serial hash, which then mostly reads from the page cache.
void RepackJob::hash_source_tree() {
  IoError err;
  if (!sha256_tree_file(src_, options_.tree_chunk, tree_chunks_, err, &hash_stop_, &hashed_)) {
    tree_error_ = err.message;  // empty when stopped: the copy failed and says why
    return;
  }
  tree_root_ = sha256_tree_root(options_.tree_chunk, src_.size(), tree_chunks_);
  r_.source_tree_root = sha256_hex(tree_root_);
}

// Runs on the hash thread; touches only hashed_, hash_error_ and r_.source_sha256,
// which the main thread reads after join().
// The SHA-256 of the whole input is the longest single job of a repack; it reads the
// source with pread in big windows (never a mapping: a source truncated under us is a
// read error naming the offset, not a SIGBUS), one window resident at a time.
void RepackJob::hash_source() {
  Sha256 sha;
  std::vector<uint8_t> window(static_cast<size_t>(std::min<uint64_t>(kHashWindowBytes, src_.size())));
  for (uint64_t pos = 0; pos < src_.size() && !hash_stop_.load(); pos += kHashWindowBytes) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kHashWindowBytes, src_.size() - pos));
    IoError err;
    if (!src_.read_at(pos, std::span<uint8_t>(window.data(), n), err)) {
      hash_error_ = err.message;
      return;
    }
    sha.update(std::span<const uint8_t>(window.data(), n));
    hashed_.fetch_add(n);
  }
  if (!hash_stop_.load()) r_.source_sha256 = sha.hex_digest();
}

bool RepackJob::finish_source_hash() {
  // Keep the progress line moving while the hash catches up with the copy.
  while (hashes_running_.load() > 0) {
    add_progress(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (hash_thread_.joinable()) hash_thread_.join();
  if (tree_thread_.joinable()) tree_thread_.join();
  add_progress(0);
  if (!hash_error_.empty()) return io_fail("IO_READ", in_, "cannot hash " + in_ + ": " + hash_error_);
  if (!tree_error_.empty()) return io_fail("IO_READ", in_, "cannot hash " + in_ + " (SHA-256 tree): " + tree_error_);
  return true;
}

void RepackJob::add_progress(uint64_t bytes) {
  done_work_ += bytes;
  if (options_.progress) options_.progress(done_work_ + hashed_.load(), total_work_);
}

bool RepackJob::flush(AtomicOutput& out) {
  std::string error;
  if (buf_fill_ > 0 && !out.write(buf_.get(), buf_fill_, error)) return io_fail("IO_WRITE", out_dir_, error);
  add_progress(buf_fill_);
  written_ += buf_fill_;
  buf_fill_ = 0;
  return true;
}

bool RepackJob::end_writes(AtomicOutput& out) {
  std::string error;
  return out.end_writes(error) || io_fail("IO_WRITE", out_dir_, error);
}

// Reads [src, src + len) of the input straight into the staging buffer, hashing as it lands.
bool RepackJob::copy_part(AtomicOutput& out, uint64_t src, uint64_t len, Xxh3& hash) {
  while (len > 0) {
    if (buf_fill_ == kCopyBufferBytes && !flush(out)) return false;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, kCopyBufferBytes - buf_fill_));
    std::span<uint8_t> dst(buf_.get() + buf_fill_, n);
    IoError err;
    if (!src_.read_at(src, dst, err)) return io_fail("IO_READ", in_, err.message);
    hash.update(dst);
    buf_fill_ += n;
    src += n;
    len -= n;
  }
  return true;
}

bool RepackJob::stage_zeros(AtomicOutput& out, uint64_t n) {
  while (n > 0) {
    if (buf_fill_ == kCopyBufferBytes && !flush(out)) return false;
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, kCopyBufferBytes - buf_fill_));
    std::memset(buf_.get() + buf_fill_, 0, k);
    buf_fill_ += k;
    n -= k;
  }
  return true;
}

// The three parts of an expert sit in three tensors far apart: ask the kernel to read the
// coming window of each, so the interleaved reads do not defeat its per-file readahead.
void RepackJob::read_ahead(const ExpertLayer& l, uint64_t first_expert, uint64_t count) const {
  if (first_expert >= l.experts) return;
  count = std::min(count, l.experts - first_expert);
  for (const auto& p : l.parts) {
    ::posix_fadvise(src_.fd(), static_cast<off_t>(p.data_offset + first_expert * p.stride),
                    static_cast<off_t>(count * p.stride), POSIX_FADV_WILLNEED);
  }
}

bool RepackJob::write_experts(AtomicOutput& out) {
  if (std::string error; !out.reserve(experts_size_, error)) return io_fail("IO_WRITE", out_dir_, error);
  buf_ = std::make_unique<uint8_t[]>(kCopyBufferBytes);
  for (const auto& l : layers_) {
    const uint64_t window = std::max<uint64_t>(1, kReadAheadBytes / std::max<uint64_t>(1, l.blob_size));
    read_ahead(l, 0, window);
    for (uint64_t e = 0; e < l.experts; ++e) {
      if (e % window == 0) read_ahead(l, e + window, window);
      BlobRecord blob{l.layer, e, written_ + buf_fill_, l.blob_size, {}};
      uint64_t in_blob = 0;
      for (const auto& p : l.parts) {
        PartRecord part{in_blob, p.stride, p.data_offset + e * p.stride, 0};
        Xxh3 hash;
        if (!copy_part(out, part.source_offset, p.stride, hash)) return false;
        part.xxh3 = hash.digest();
        blob.parts.push_back(part);
        in_blob += p.stride;
      }
      if (!stage_zeros(out, l.blob_stride - l.blob_size)) return false;
      blobs_.push_back(std::move(blob));
    }
  }
  if (!flush(out)) return false;
  buf_.reset();
  return true;
}

bool RepackJob::plan_dense(GgufWriter& w) {
  std::string error;
  for (const auto& kv : g_->kvs) {
    if (kv.key == kRepackExpertsKey || kv.key == kRepackALogKey) continue;  // rewritten below
    if (!w.copy_kv(src_, kv, error)) return fail(kRepackInputError, "REPACK_DENSE", in_, "", kv.offset, error);
  }
  if (!w.add_string_kv(kRepackExpertsKey, kPackExpertsFile, error) || !w.add_string_kv(kRepackALogKey, r_.a_log, error)) {
    return fail(kRepackInputError, "REPACK_DENSE", in_, "", std::nullopt, error);
  }
  for (const auto* t : dense_) {
    uint64_t layer = 0;
    const bool fix = fix_a_log_ && is_ssm_a(*t, layer);
    const std::string name = fix ? "blk." + std::to_string(layer) + ".A_log" : t->name;
    if (!w.add_tensor(name, t->n_dims, t->ne, t->type, error)) {
      return fail(kRepackInputError, "REPACK_DENSE", in_, t->name, t->info_offset, error);
    }
  }
  return true;
}

bool RepackJob::stream_dense_tensor(GgufWriter& w, AtomicOutput& out, const GgufTensorInfo& t, bool fix) {
  std::vector<uint8_t>& buf = dense_buf_;
  const uint64_t start = g_->data_start + t.offset;
  std::string error;
  for (uint64_t pos = 0; pos < t.nbytes; pos += buf.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), t.nbytes - pos));
    std::span<uint8_t> chunk(buf.data(), n);
    IoError err;
    if (!src_.read_at(start + pos, chunk, err)) return io_fail("IO_READ", in_, err.message);
    if (fix) {  // F32 values, scanned before; chunk sizes are multiples of 4
      for (size_t i = 0; i + 4 <= n; i += 4) {
        float v;
        std::memcpy(&v, chunk.data() + i, 4);
        v = a_log_from_ssm_a(v);
        std::memcpy(chunk.data() + i, &v, 4);
      }
    }
    if (!w.write_data(out, chunk, error)) return io_fail("IO_WRITE", out_dir_, error);
    add_progress(n);
  }
  if (!w.end_tensor(out, error)) return io_fail("IO_WRITE", out_dir_, error);
  return true;
}

bool RepackJob::write_dense(AtomicOutput& out) {
  GgufWriter w(g_->alignment);
  if (!plan_dense(w)) return false;
  std::string error;
  if (!w.begin(out, error)) return io_fail("IO_WRITE", out_dir_, error);
  dense_buf_.assign(kCopyBufferBytes, 0);
  for (const auto* t : dense_) {
    uint64_t layer = 0;
    if (!stream_dense_tensor(w, out, *t, fix_a_log_ && is_ssm_a(*t, layer))) return false;
  }
  dense_buf_ = {};
  if (!w.finish(error)) return io_fail("IO_WRITE", out_dir_, error);
  r_.dense_bytes = w.file_size();
  r_.dense_tensors = w.tensors().size();
  return true;
}

void write_part_json(JsonWriter& w, const ExpertPart& p, const PartRecord& rec) {
  w.begin_object();
  w.key("tensor").value(p.tensor->name).key("role").value(p.role);
  w.key("type").value(ggml_type_name(p.tensor->type)).key("type_id").value(static_cast<int64_t>(p.tensor->type));
  w.key("ne").begin_array().value(p.tensor->ne[0]).value(p.tensor->ne[1]).end_array();
  w.key("offset").value(rec.offset_in_blob).key("size").value(rec.size);
  w.key("source_offset").value(rec.source_offset).key("xxh3").value(xxh3_hex(rec.xxh3));
  w.end_object();
}

void write_layer_json(JsonWriter& w, const ExpertLayer& l, const RepackLayerStats& stats) {
  w.begin_object();
  w.key("layer").value(l.layer).key("expert_count").value(l.experts);
  w.key("blob_size").value(l.blob_size).key("blob_stride").value(l.blob_stride);
  w.key("first_blob_offset").value(l.first_blob_offset);
  w.key("parts").begin_array();
  for (size_t i = 0; i < l.parts.size(); ++i) {
    const auto& p = l.parts[i];
    w.begin_object().key("tensor").value(p.tensor->name).key("role").value(p.role);
    w.key("type").value(ggml_type_name(p.tensor->type)).key("type_id").value(static_cast<int64_t>(p.tensor->type));
    w.key("ne").begin_array().value(p.tensor->ne[0]).value(p.tensor->ne[1]).value(p.tensor->ne[2]).end_array();
    w.key("expert_stride").value(p.stride).key("stride_aligned").value(stats.parts[i].stride_aligned);
    w.key("source_offset").value(p.data_offset).end_object();
  }
  w.end_array();
  w.key("repack_reasons").begin_array();
  for (const auto& reason : stats.reasons) w.value(reason);
  w.end_array().end_object();
}

std::string RepackJob::manifest_json() const {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value(kPackManifestSchema);
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(CKPT_VERSION).end_object();
  w.key("source").begin_object().key("path").value(in_).key("name").value(fs::path(in_).filename().string());
  w.key("size").value(src_.size());
  if (options_.source_sha256) w.key("sha256").value(r_.source_sha256);
  if (options_.tree_chunk != 0) {
    w.key("sha256_tree").begin_object().key("scheme").value(kSha256TreeScheme);
    w.key("chunk_size").value(options_.tree_chunk).key("root").value(sha256_hex(tree_root_)).key("chunks").begin_array();
    for (const auto& c : tree_chunks_) w.value(sha256_hex(c));
    w.end_array().end_object();
  }
  w.key("alignment").value(g_->alignment).key("tensor_count").value(static_cast<uint64_t>(g_->tensors.size())).end_object();
  w.key("alignment").value(options_.align).key("a_log").value(r_.a_log);
  w.key("experts_file").begin_object().key("name").value(kPackExpertsFile).key("size").value(experts_size_).end_object();
  w.key("dense_file").begin_object().key("name").value(kPackDenseFile).key("size").value(r_.dense_bytes);
  w.key("tensor_count").value(r_.dense_tensors).end_object();
  w.key("layers").begin_array();
  for (size_t i = 0; i < layers_.size(); ++i) write_layer_json(w, layers_[i], r_.layers[i]);
  w.end_array();
  w.key("blobs").begin_array();
  size_t layer_index = 0;
  for (const auto& b : blobs_) {
    while (layers_[layer_index].layer != b.layer) ++layer_index;
    const auto& l = layers_[layer_index];
    w.begin_object().key("layer").value(b.layer).key("expert").value(b.expert);
    w.key("offset").value(b.offset).key("size").value(b.size).key("parts").begin_array();
    for (size_t i = 0; i < b.parts.size(); ++i) write_part_json(w, l.parts[i], b.parts[i]);
    w.end_array().end_object();
  }
  w.end_array().end_object();
  return w.str() + "\n";
}

bool RepackJob::write_manifest() {
  std::string error;
  const std::string path = (fs::path(out_dir_) / kPackManifestFile).string();
  AtomicOutput out(path, mode_);  // renamed over the name, never written in place
  const std::string text = manifest_json();
  if (!out.open(error) || !out.write(reinterpret_cast<const uint8_t*>(text.data()), text.size(), error) ||
      !out.commit(error))
    return io_fail("IO_WRITE", path, error);
  return true;
}

void RepackJob::run() {
  r_.input = in_;
  r_.out_dir = out_dir_;
  r_.align = options_.align;
  r_.tree_chunk = options_.tree_chunk;
  InputSet inputs;
  inputs.add_file(in_);
  mode_ = inputs.output_mode();
  if (!check_options() || !check_out_dir() || !open_input() || !plan_experts() || !plan_a_log() || !require_experts() ||
      !create_out_dir() || !lock_out_dir() || !withdraw_manifest()) {
    return;
  }
  uint64_t dense_data = 0;
  for (const auto* t : dense_) dense_data += t->nbytes;  // each within the file: no overflow
  if (!check_free_space(dense_data)) return;
  src_.advise_sequential();
  total_work_ = src_.size() * ((options_.source_sha256 ? 1 : 0) + (options_.tree_chunk != 0 ? 1 : 0)) + experts_size_ +
                dense_data;
  AtomicOutput experts((fs::path(out_dir_) / kPackExpertsFile).string(), mode_, OutputUse::bulk);
  AtomicOutput dense((fs::path(out_dir_) / kPackDenseFile).string(), mode_, OutputUse::bulk);
  std::string error;
  if (!experts.open(error) || !dense.open(error)) {
    io_fail("IO_CREATE", out_dir_, error);
    return;
  }
  start_source_hash();
  // experts.bin's last writes before dense.gguf's first: one writer's buffers at a time.
  const bool wrote = write_experts(experts) && end_writes(experts) && write_dense(dense);
  if (!wrote) hash_stop_ = true;
  const bool hashed = finish_source_hash();
  if (!wrote || !hashed) return;
  // Both data files are complete before either is renamed into place; the manifest,
  // written last, is what marks the pack as finished (an old one was withdrawn first).
  if (!experts.commit(error) || !dense.commit(error)) {
    io_fail("IO_WRITE", out_dir_, error);
    return;
  }
  if (write_manifest() && options_.after_finish) options_.after_finish(r_);
}

}  // namespace

RepackReport repack_experts(const std::string& in, const std::string& out_dir, const RepackOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  RepackReport report;
  RepackJob(in, out_dir, options, report).run();
  report.findings.sort_stable();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string repack_report_json(const RepackReport& r) {
  JsonWriter w;
  w.begin_object();
  w.key("schema").value("ckptkit/repack-report/v1");
  w.key("tool").begin_object().key("name").value("ckptkit").key("version").value(kVersion).key("commit").value(build_commit()).end_object();
  w.key("input").value(r.input).key("out_dir").value(r.out_dir).key("status").value(outcome_name(repack_outcome(r.status)));
  w.key("options").begin_object().key("align").value(r.align).key("a_log").value(r.a_log).end_object();
  w.key("source_sha256").value(r.source_sha256);  // "" when not computed (--no-source-sha256, or a failure)
  if (!r.source_tree_root.empty()) {
    w.key("source_sha256_tree").begin_object().key("scheme").value(kSha256TreeScheme);
    w.key("chunk_size").value(r.tree_chunk).key("root").value(r.source_tree_root).end_object();
  }
  w.key("layers").begin_array();
  for (const auto& l : r.layers) {
    w.begin_object().key("layer").value(l.layer).key("expert_count").value(l.experts);
    w.key("blob_size").value(l.blob_size).key("blob_stride").value(l.blob_stride).key("parts").begin_array();
    for (const auto& p : l.parts) {
      w.begin_object().key("tensor").value(p.tensor).key("role").value(p.role).key("type").value(p.type);
      w.key("expert_stride").value(p.expert_stride).key("stride_aligned").value(p.stride_aligned).end_object();
    }
    w.end_array().key("repack_reasons").begin_array();
    for (const auto& reason : l.reasons) w.value(reason);
    w.end_array().end_object();
  }
  w.end_array();
  w.key("totals").begin_object().key("blobs").value(r.blobs).key("experts_bytes").value(r.experts_bytes);
  w.key("padding_bytes").value(r.padding_bytes).key("dense_bytes").value(r.dense_bytes);
  w.key("dense_tensors").value(r.dense_tensors).key("a_log_tensors").value(r.a_log_tensors);
  w.key("source_bytes").value(r.source_bytes).key("seconds").value(r.seconds).end_object();
  write_findings_json(w, r.findings);
  w.end_object();
  return w.str() + "\n";
}

}  // namespace ckpt
