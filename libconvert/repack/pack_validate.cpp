#include "repack/pack_validate.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/json.h"
#include "io/hash.h"
#include "io/mapped_file.h"
#include "io/sha256_tree.h"
#include "repack/expert_pack.h"
#include "formats/pack_manifest.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

constexpr size_t kReadChunk = 4u << 20;             // streaming buffer per file
constexpr size_t kMaxPaddingFindings = 8;

// A plain file name inside the pack: no directories, no "..", nothing that leaves it.
bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return c == '/' || c == '\\' || c == '\0'; });
}

// The pack's checks in order; each appends findings and the later ones skip what an
// earlier failure makes meaningless.
class PackValidator {
 public:
  PackValidator(const std::string& dir, Findings& f) : dir_(dir), f_(f) {}
  void run(const std::string& reference, bool deep);
  // Everything that needs no other file: typed members, names, alignment, geometry.
  void run_manifest_only(std::string_view text, const std::string& display, std::optional<uint64_t> experts_file_size);

 private:
  bool load_manifest();
  bool check_names();
  bool check_experts_file();
  void check_blob_geometry();
  void check_parts(PackManifestBlob& b);
  void check_blob_order();
  void open_reference(const std::string& reference, bool deep);
  void scan_parts(bool hash);
  void check_padding();
  void check_dense();
  void check_reference(bool deep);
  bool reference_identity(const MappedFile& ref, bool deep, Findings& f) const;
  bool reference_sha256(const MappedFile& ref, Findings& f) const;
  bool reference_tree(const MappedFile& ref, const PackSourceTree& tree, Findings& f) const;
  bool expected_source(const GgufFile& g, const PackManifestBlob& b, const PackManifestPart& p, Findings& f);
  void check_coverage(const GgufFile& g);
  void compare_dense(const MappedFile& ref, const GgufFile& g);
  void compare_dense_kvs(const MappedFile& ref, const GgufFile& g);
  void compare_a_log(const MappedFile& ref, uint64_t ref_data_start, const GgufTensorInfo& src, const GgufTensorInfo& out);
  struct Buffers {
    std::vector<uint8_t> a, b;
  };
  bool bytes_equal(const MappedFile& a, uint64_t a_off, const MappedFile& b, uint64_t b_off, uint64_t len,
                   uint64_t& first_diff) {
    return bytes_equal(a, a_off, b, b_off, len, first_diff, f_, bufs_);
  }
  static bool bytes_equal(const MappedFile& a, uint64_t a_off, const MappedFile& b, uint64_t b_off, uint64_t len,
                          uint64_t& first_diff, Findings& f, Buffers& bufs);
  bool part_in_file(const PackManifestBlob& b, const PackManifestPart& p) const;
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  std::string dir_;
  Findings& f_;
  PackManifest m_;
  MappedFile experts_, dense_;
  uint64_t experts_size_ = 0;  // experts_.size() once opened (or the size given to run_manifest_only)
  std::optional<GgufFile> dense_gguf_;  // when dense.gguf read without errors
  bool geometry_ok_ = true;
  std::vector<uint8_t> buf_a_;  // streaming buffer, allocated once
  Buffers bufs_;                // bytes_equal's on this thread
  // The reference (--reference), opened and parsed before the parts are read, so that
  // one pass over each part both hashes it and compares it with its source slice; the
  // findings of both keep their places in the report (scan_parts, check_reference).
  std::string ref_path_;
  MappedFile ref_;
  bool ref_opened_ = false;
  std::string ref_open_error_;
  std::optional<GgufFile> ref_gguf_;  // when the reference is a valid GGUF
  bool compared_ = false;             // scan_parts compared the parts with it
  std::vector<Findings> compare_found_;  // per part, in part order
  Findings identity_findings_;
  bool identity_ok_ = false;
  // The reference's identity check (its SHA-256 tree on all cores, or for a manifest
  // without one its SHA-256 in one stream) on a thread of its own, from open_reference to
  // check_reference; last, so that it is joined before the members it uses go.
  std::jthread identity_;
};

bool PackValidator::load_manifest() { return read_pack_manifest(dir_, m_, f_); }

bool PackValidator::check_names() {
  bool ok = true;
  for (const auto* name : {&m_.experts_name, &m_.dense_name}) {
    if (!is_plain_file_name(*name)) {
      f_.error("PACK_NAME_ESCAPES", path(kPackManifestFile), "", std::nullopt,
               "manifest names the file '" + *name + "', which is not a plain file name inside the pack");
      ok = false;
    }
  }
  if (!is_power_of_two(m_.alignment) || m_.alignment < kRepackMinAlign) {
    f_.error("PACK_ALIGNMENT", path(kPackManifestFile), "", std::nullopt,
             "alignment " + std::to_string(m_.alignment) + " is not a power of two of at least " +
                 std::to_string(kRepackMinAlign));
    ok = false;
  }
  return ok;
}

bool PackValidator::check_experts_file() {
  const std::string file = path(m_.experts_name);
  IoError err;
  if (!experts_.open(file, err)) {
    f_.error("PACK_FILE_MISSING", file, "", std::nullopt, "cannot read the experts file: " + err.message);
    return false;
  }
  experts_size_ = experts_.size();
  if (experts_.size() != m_.experts_size) {
    f_.error("PACK_FILE_SIZE", file, "", experts_.size(),
             m_.experts_name + " is " + std::to_string(experts_.size()) + " bytes, the manifest says " +
                 std::to_string(m_.experts_size));
  }
  if (experts_.size() % m_.alignment != 0) {
    f_.error("PACK_FILE_UNALIGNED", file, "", experts_.size(),
             m_.experts_name + " length " + std::to_string(experts_.size()) + " is not a multiple of the alignment " +
                 std::to_string(m_.alignment));
  }
  return true;
}

bool PackValidator::part_in_file(const PackManifestBlob& b, const PackManifestPart& p) const {
  auto start = checked_add(b.offset, p.offset);
  auto end = start ? checked_add(*start, p.size) : std::nullopt;
  return end && *end <= experts_size_;
}

// Parts must be of a live type, sized as their shape says, inside their blob, disjoint.
void PackValidator::check_parts(PackManifestBlob& b) {
  const std::string file = path(m_.experts_name);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& p : b.parts) {
    const uint64_t ne[4] = {p.ne0, p.ne1, 1, 1};
    auto nbytes = ggml_nbytes(static_cast<int32_t>(p.type_id), ne);
    if (ggml_type_name(static_cast<int32_t>(p.type_id)) != p.type || !nbytes || *nbytes != p.size) {
      f_.error("PACK_PART_SIZE", file, p.tensor, std::nullopt,
               pack_blob_name(b) + " part '" + p.tensor + "' is " + std::to_string(p.size) + " bytes of " + p.type + " (id " +
                   std::to_string(p.type_id) + ") with ne {" + std::to_string(p.ne0) + ", " + std::to_string(p.ne1) +
                   "}, which does not match its type and shape");
      b.parts_ok = false;
    }
    auto end = checked_add(p.offset, p.size);
    if (!end || *end > b.size || p.size == 0) {
      f_.error("PACK_PART_RANGE", file, p.tensor, std::nullopt,
               pack_blob_name(b) + " part '" + p.tensor + "' [" + std::to_string(p.offset) + ", +" + std::to_string(p.size) +
                   ") does not lie inside the blob's " + std::to_string(b.size) + " bytes");
      b.parts_ok = false;
      continue;
    }
    ranges.emplace_back(p.offset, *end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      f_.error("PACK_PART_OVERLAP", file, "", b.offset + ranges[i].first,
               pack_blob_name(b) + " has parts overlapping at blob offset " + std::to_string(ranges[i].first));
      b.parts_ok = false;
    }
  }
}

void PackValidator::check_blob_geometry() {
  const std::string file = path(m_.experts_name);
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (auto& b : m_.blobs) {
    if (!seen.insert({b.layer, b.expert}).second) {
      f_.error("PACK_BLOB_DUPLICATE", file, "", b.offset, pack_blob_name(b) + " appears more than once");
      geometry_ok_ = false;
    }
    if (b.offset % m_.alignment != 0) {
      f_.error("PACK_BLOB_UNALIGNED", file, "", b.offset,
               pack_blob_name(b) + " starts at " + std::to_string(b.offset) + ", not a multiple of " + std::to_string(m_.alignment));
      geometry_ok_ = false;
    }
    auto end = checked_add(b.offset, b.size);
    if (!end || *end > experts_size_ || b.size == 0) {
      f_.error("PACK_BLOB_RANGE", file, "", b.offset,
               pack_blob_name(b) + " [" + std::to_string(b.offset) + ", +" + std::to_string(b.size) + ") does not lie inside " +
                   m_.experts_name + " (" + std::to_string(experts_size_) + " bytes)");
      geometry_ok_ = false;
    }
    check_parts(b);
  }
  check_blob_order();
}

void PackValidator::check_blob_order() {
  std::vector<const PackManifestBlob*> sorted;
  for (const auto& b : m_.blobs) sorted.push_back(&b);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const auto& prev = *sorted[i - 1];
    auto prev_end = checked_add(prev.offset, prev.size);
    if (!prev_end || sorted[i]->offset < *prev_end) {
      f_.error("PACK_BLOB_OVERLAP", path(m_.experts_name), "", sorted[i]->offset,
               pack_blob_name(*sorted[i]) + " at " + std::to_string(sorted[i]->offset) + " overlaps " + pack_blob_name(prev));
      geometry_ok_ = false;
    }
  }
}

// The point of the manifest: every part's bytes hash to what it records. Streamed, every
// part on all cores. With a reference (valid GGUF, sane geometry) the same pass compares
// each part with its source slice, so experts.bin is read once: the hash findings are
// appended here in part order up to the first part that could not be read (as one thread
// reading them in order would stop there), the comparison's kept per part for
// check_reference. `hash` false (experts.bin missing): only the comparison.
void PackValidator::scan_parts(bool hash) {
  const std::string file = path(m_.experts_name);
  std::vector<std::pair<const PackManifestBlob*, const PackManifestPart*>> parts;
  for (const auto& b : m_.blobs)
    for (const auto& p : b.parts) parts.emplace_back(&b, &p);
  compared_ = ref_gguf_.has_value() && geometry_ok_;
  if (!hash && !compared_) return;
  std::vector<Findings> found(parts.size());
  std::vector<uint8_t> unreadable(parts.size(), 0);
  if (compared_) compare_found_.assign(parts.size(), Findings{});
  tbb::enumerable_thread_specific<Buffers> buffers;
  tbb::parallel_for(tbb::blocked_range<size_t>(0, parts.size(), 8), [&](const tbb::blocked_range<size_t>& r) {
    Buffers& bufs = buffers.local();
    bufs.a.resize(kReadChunk);
    if (compared_) bufs.b.resize(kReadChunk);
    for (size_t i = r.begin(); i < r.end(); ++i) {
      const PackManifestBlob& b = *parts[i].first;
      const PackManifestPart& p = *parts[i].second;
      if (!part_in_file(b, p)) continue;  // already reported as a range finding
      const uint64_t start = b.offset + p.offset;
      bool hashing = hash, comparing = compared_ && expected_source(*ref_gguf_, b, p, compare_found_[i]);
      // As bytes_equal reports a comparison it cannot finish or that finds a difference.
      auto mismatch = [&](uint64_t diff) {
        compare_found_[i].error("PACK_SOURCE_MISMATCH", file, p.tensor, start + diff,
                                pack_blob_name(b) + " part '" + p.tensor + "' differs from its source slice at byte " +
                                    std::to_string(diff) + " (source offset " + std::to_string(p.source_offset + diff) + ")");
        comparing = false;
      };
      Xxh3 xxh;
      for (uint64_t pos = 0; pos < p.size && (hashing || comparing); pos += kReadChunk) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunk, p.size - pos));
        std::span<uint8_t> x(bufs.a.data(), n);
        IoError err;
        if (!experts_.read_at(start + pos, x, err)) {
          if (hashing) {
            found[i].error("IO_READ", file, p.tensor, start + pos, err.message);
            unreadable[i] = 1;
            hashing = false;
          }
          if (comparing) {
            compare_found_[i].error("IO_READ", err.path, "", std::nullopt, err.message);
            mismatch(pos);
          }
          break;
        }
        if (hashing) xxh.update(x);
        if (!comparing) continue;
        std::span<uint8_t> y(bufs.b.data(), n);
        if (!ref_.read_at(p.source_offset + pos, y, err)) {
          compare_found_[i].error("IO_READ", err.path, "", std::nullopt, err.message);
          mismatch(pos);
        } else if (std::memcmp(x.data(), y.data(), n) != 0) {
          size_t k = 0;
          while (x[k] == y[k]) ++k;
          mismatch(pos + k);
        }
      }
      if (!hash || unreadable[i]) continue;
      const std::string got = xxh3_hex(xxh.digest());
      if (got != p.xxh3) {
        found[i].error("PACK_PART_HASH", file, p.tensor, start,
                       pack_blob_name(b) + " part '" + p.tensor + "' at " + std::to_string(start) + " has xxh3 " + got +
                           ", the manifest says " + p.xxh3);
      }
    }
  });
  for (size_t i = 0; i < parts.size() && hash; ++i) {
    f_.append(found[i]);
    if (unreadable[i]) return;
  }
}

// Bytes outside every blob are padding and must be zero (a reader may read them).
void PackValidator::check_padding() {
  std::vector<std::pair<uint64_t, uint64_t>> blobs;
  for (const auto& b : m_.blobs) blobs.emplace_back(b.offset, b.offset + b.size);
  std::sort(blobs.begin(), blobs.end());
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  uint64_t pos = 0;
  for (const auto& [start, end] : blobs) {
    if (start > pos) gaps.emplace_back(pos, start);
    pos = std::max(pos, end);
  }
  if (experts_.size() > pos) gaps.emplace_back(pos, experts_.size());
  size_t reported = 0;
  std::vector<uint8_t>& buf = buf_a_;
  buf.resize(kReadChunk);
  for (const auto& [start, end] : gaps) {
    for (uint64_t pos = start; pos < end; pos += buf.size()) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), end - pos));
      IoError err;
      if (!experts_.read_at(pos, std::span<uint8_t>(buf.data(), n), err)) {
        f_.error("IO_READ", path(m_.experts_name), "", pos, err.message);
        return;
      }
      auto it = std::find_if(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n), [](uint8_t v) { return v != 0; });
      if (it == buf.begin() + static_cast<std::ptrdiff_t>(n)) continue;
      const uint64_t at = pos + static_cast<uint64_t>(it - buf.begin());
      if (reported++ < kMaxPaddingFindings) {
        f_.warning("PACK_PADDING_NONZERO", path(m_.experts_name), "", at,
                   "padding byte at " + std::to_string(at) + " is " + std::to_string(*it) + ", expected 0");
      }
      break;  // one finding per gap
    }
  }
}

void PackValidator::check_dense() {
  const std::string file = path(m_.dense_name);
  IoError err;
  if (!dense_.open(file, err)) {
    f_.error("PACK_FILE_MISSING", file, "", std::nullopt, "cannot read the dense file: " + err.message);
    return;
  }
  if (dense_.size() != m_.dense_size) {
    f_.error("PACK_FILE_SIZE", file, "", dense_.size(),
             m_.dense_name + " is " + std::to_string(dense_.size()) + " bytes, the manifest says " + std::to_string(m_.dense_size));
  }
  Findings gguf_findings;
  auto g = read_gguf(dense_, file, gguf_findings);
  for (const auto& finding : gguf_findings.items()) {
    if (finding.severity == Severity::error) f_.add(finding);
  }
  if (!g || gguf_findings.has_errors()) {
    f_.error("PACK_DENSE_INVALID", file, "", std::nullopt, m_.dense_name + " is not a valid GGUF file");
    return;
  }
  dense_gguf_ = std::move(g);
  const auto& dg = dense_gguf_;
  const auto experts_marker = dg->get_string(kRepackExpertsKey);
  const auto a_log_marker = dg->get_string(kRepackALogKey);
  if (experts_marker != m_.experts_name || a_log_marker != m_.a_log) {
    f_.error("PACK_DENSE_MARKER", file, "", std::nullopt,
             m_.dense_name + " records " + kRepackExpertsKey + " = '" + experts_marker.value_or("(missing)") + "' and " +
                 kRepackALogKey + " = '" + a_log_marker.value_or("(missing)") + "', the manifest says '" + m_.experts_name +
                 "' and '" + m_.a_log + "'");
  }
}

// On the identity thread (open_reference): its own buffers, its own findings. The SHA-256
// tree when the manifest has one (on all cores), else the SHA-256 (one stream). `deep`
// also proves the manifest's whole-file source.sha256 beside a tree (the stream the tree
// exists to avoid, so only when asked for): a pack must not vouch for a digest nobody checked.
bool PackValidator::reference_identity(const MappedFile& ref, bool deep, Findings& f) const {
  if (!m_.source_tree) return reference_sha256(ref, f);
  // --deep recomputes the whole-file SHA-256 too, where the manifest records one (a pack
  // made with --no-source-sha256 names its source by the tree alone).
  return reference_tree(ref, *m_.source_tree, f) && (!deep || m_.source_sha256.empty() || reference_sha256(ref, f));
}

// Every chunk of the reference hashed by one task; a mismatch names the first chunk that
// differs (its byte range) and how many do.
bool PackValidator::reference_tree(const MappedFile& ref, const PackSourceTree& tree, Findings& f) const {
  if (ref.size() != m_.source_size) {
    f.error("PACK_SOURCE_SHA256", ref.path(), "", std::nullopt,
            "reference is " + std::to_string(ref.size()) + " bytes, the manifest's source has " +
                std::to_string(m_.source_size) + ": it is not the pack's source");
    return false;
  }
  std::vector<Sha256Digest> got;
  IoError err;
  uint64_t at = 0;
  if (!sha256_tree_file(ref, tree.chunk_size, got, err, nullptr, nullptr, &at)) {
    f.error("IO_READ", ref.path(), "", at, err.message);
    return false;
  }
  size_t first = got.size(), differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == tree.chunks[i]) continue;
    if (differ++ == 0) first = i;
  }
  if (differ == 0) return true;
  const uint64_t begin = first * tree.chunk_size, end = std::min(m_.source_size, begin + tree.chunk_size);
  f.error("PACK_SOURCE_SHA256", ref.path(), "", begin,
          "reference bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") (chunk " + std::to_string(first) +
              " of " + std::to_string(got.size()) + ", chunk size " + std::to_string(tree.chunk_size) + ") have SHA-256 " +
              sha256_hex(got[first]) + ", the manifest's source tree has " + sha256_hex(tree.chunks[first]) + "; " +
              std::to_string(differ) + " of " + std::to_string(got.size()) + " chunks differ: it is not the pack's source");
  return false;
}

bool PackValidator::reference_sha256(const MappedFile& ref, Findings& f) const {
  Sha256 sha;
  std::vector<uint8_t> buf(kReadChunk);
  for (uint64_t pos = 0; pos < ref.size(); pos += buf.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), ref.size() - pos));
    IoError err;
    if (!ref.read_at(pos, std::span<uint8_t>(buf.data(), n), err)) {
      f.error("IO_READ", ref.path(), "", pos, err.message);
      return false;
    }
    sha.update(std::span<const uint8_t>(buf.data(), n));
  }
  const std::string got = sha.hex_digest();
  if (got != m_.source_sha256) {
    f.error("PACK_SOURCE_SHA256", ref.path(), "", std::nullopt,
             "reference SHA-256 is " + got + ", the manifest's source has " + m_.source_sha256);
    return false;
  }
  return true;
}

// The part must be expert b.expert's slice of the named 3-D tensor in the reference.
bool PackValidator::expected_source(const GgufFile& g, const PackManifestBlob& b, const PackManifestPart& p, Findings& f) {
  const auto* t = g.find_tensor(p.tensor);
  std::optional<uint64_t> expected;
  if (t != nullptr && t->n_dims == 3 && b.expert < t->ne[2] && t->nbytes / t->ne[2] == p.size) {
    expected = checked_add(g.data_start + t->offset, b.expert * p.size);  // inside the file: read_gguf checked
  }
  if (!expected || *expected != p.source_offset) {
    f.error("PACK_SOURCE_RANGE", path(m_.experts_name), p.tensor, std::nullopt,
             pack_blob_name(b) + " part '" + p.tensor + "' claims source bytes [" + std::to_string(p.source_offset) + ", +" +
                 std::to_string(p.size) + "), which are not expert " + std::to_string(b.expert) + " of that tensor");
    return false;
  }
  return true;
}

bool PackValidator::bytes_equal(const MappedFile& a, uint64_t a_off, const MappedFile& b, uint64_t b_off, uint64_t len,
                                uint64_t& first_diff, Findings& f, Buffers& bufs) {
  std::vector<uint8_t>& x = bufs.a;
  std::vector<uint8_t>& y = bufs.b;
  x.resize(kReadChunk);
  y.resize(kReadChunk);
  for (uint64_t pos = 0; pos < len; pos += x.size()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(x.size(), len - pos));
    IoError err;
    if (!a.read_at(a_off + pos, std::span<uint8_t>(x.data(), n), err) ||
        !b.read_at(b_off + pos, std::span<uint8_t>(y.data(), n), err)) {
      f.error("IO_READ", err.path, "", std::nullopt, err.message);
      first_diff = pos;
      return false;
    }
    if (std::memcmp(x.data(), y.data(), n) != 0) {
      size_t i = 0;
      while (x[i] == y[i]) ++i;
      first_diff = pos + i;
      return false;
    }
  }
  return true;
}

// Every expert of every expert tensor in the reference is in exactly one blob.
void PackValidator::check_coverage(const GgufFile& g) {
  std::map<std::string, std::set<uint64_t>> packed;
  for (const auto& b : m_.blobs) {
    for (const auto& p : b.parts) packed[p.tensor].insert(b.expert);
  }
  for (const auto& t : g.tensors) {
    const bool expert = t.n_dims == 3 && t.name.find("_exps.weight") != std::string::npos && t.name.rfind("blk.", 0) == 0;
    if (!expert) continue;
    const auto& have = packed[t.name];
    if (have.size() != t.ne[2]) {
      f_.error("PACK_EXPERT_MISSING", path(m_.experts_name), t.name, std::nullopt,
               "the pack holds " + std::to_string(have.size()) + " of the " + std::to_string(t.ne[2]) + " experts of '" +
                   t.name + "'");
    }
  }
}

// Every source KV is in dense.gguf with the same encoded bytes (type and value).
void PackValidator::compare_dense_kvs(const MappedFile& ref, const GgufFile& g) {
  const std::string file = path(m_.dense_name);
  for (const auto& kv : g.kvs) {
    if (kv.key == kRepackExpertsKey || kv.key == kRepackALogKey) continue;
    const auto* out = dense_gguf_->find_kv(kv.key);
    uint64_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;
    uint64_t diff = 0;
    const bool same = out != nullptr && gguf_kv_byte_range(ref, kv, a0, a1) && gguf_kv_byte_range(dense_, *out, b0, b1) &&
                      a1 - a0 == b1 - b0 && bytes_equal(ref, a0, dense_, b0, a1 - a0, diff);
    if (!same) {
      f_.error("PACK_DENSE_MISMATCH", file, "", std::nullopt,
               "key '" + kv.key + "' of the reference is " + (out ? "different" : "missing") + " in " + m_.dense_name);
    }
  }
}

// dense.gguf's blk.N.A_log must be log(−ssm_a) of the source, value for value, bit for bit.
void PackValidator::compare_a_log(const MappedFile& ref, uint64_t ref_data_start, const GgufTensorInfo& src,
                                  const GgufTensorInfo& out) {
  const std::string file = path(m_.dense_name);
  if (src.type != kGgmlF32 || out.type != kGgmlF32 || src.nbytes != out.nbytes) {
    f_.error("PACK_DENSE_MISMATCH", file, out.name, std::nullopt, "'" + out.name + "' does not match the shape of '" + src.name + "'");
    return;
  }
  // Bounded chunks through pread (ssm_a is small; the chunking keeps it so for any file).
  std::vector<uint8_t>& a = bufs_.a;
  std::vector<uint8_t>& b = bufs_.b;
  const uint64_t chunk = kReadChunk - kReadChunk % 4;
  for (uint64_t i = 0; i < src.nbytes / 4; ++i) {
    const uint64_t at = 4 * i % chunk;
    if (at == 0) {
      const uint64_t n = std::min(chunk, src.nbytes - 4 * i);
      IoError err;
      if (!ref.read_range(ref_data_start + src.offset + 4 * i, n, a, err) ||
          !dense_.read_range(dense_gguf_->data_start + out.offset + 4 * i, n, b, err)) {
        f_.error("IO_READ", err.path, out.name, std::nullopt, err.message);
        return;
      }
    }
    float x, y;
    std::memcpy(&x, a.data() + at, 4);
    std::memcpy(&y, b.data() + at, 4);
    const float expected = a_log_from_ssm_a(x);
    if (std::memcmp(&expected, &y, 4) != 0) {
      f_.error("PACK_A_LOG_MISMATCH", file, out.name, dense_gguf_->data_start + out.offset + 4 * i,
               "'" + out.name + "' element " + std::to_string(i) + " is not log(-" + src.name + "[" + std::to_string(i) + "])");
      return;
    }
  }
}

void PackValidator::compare_dense(const MappedFile& ref, const GgufFile& g) {
  compare_dense_kvs(ref, g);
  std::set<std::string> packed;
  for (const auto& b : m_.blobs) {
    for (const auto& p : b.parts) packed.insert(p.tensor);
  }
  const std::string file = path(m_.dense_name);
  for (const auto& t : g.tensors) {
    if (packed.count(t.name)) continue;
    const auto* out = dense_gguf_->find_tensor(t.name);
    const bool renamed = out == nullptr && m_.a_log == "fixed" && t.name.size() > 6 &&
                         t.name.compare(t.name.size() - 6, 6, ".ssm_a") == 0;
    if (renamed) out = dense_gguf_->find_tensor(t.name.substr(0, t.name.size() - 5) + "A_log");
    if (out == nullptr) {
      f_.error("PACK_DENSE_MISMATCH", file, t.name, std::nullopt, "tensor '" + t.name + "' is missing from " + m_.dense_name);
      continue;
    }
    if (renamed) {
      compare_a_log(ref, g.data_start, t, *out);
      continue;
    }
    uint64_t diff = 0;
    const bool same_shape = out->type == t.type && out->nbytes == t.nbytes && std::equal(t.ne, t.ne + 4, out->ne);
    if (!same_shape || !bytes_equal(dense_, dense_gguf_->data_start + out->offset, ref, g.data_start + t.offset, t.nbytes, diff)) {
      f_.error("PACK_DENSE_MISMATCH", file, t.name, std::nullopt,
               "tensor '" + t.name + "' differs from the reference" + (same_shape ? " at byte " + std::to_string(diff) : " in type or shape"));
    }
  }
}

// Opens and parses the reference and starts its identity check; what fails here is
// reported by check_reference, where the report has always had it.
void PackValidator::open_reference(const std::string& reference, bool deep) {
  ref_path_ = reference;
  IoError err;
  if (!ref_.open(reference, err)) {
    ref_open_error_ = err.message;
    return;
  }
  ref_opened_ = true;
  // Its identity (tree: on all cores; SHA-256: ~2 GB/s, one stream) beside the parts scan,
  // the padding and dense checks; their findings count only if the reference is the source.
  identity_ = std::jthread([this, deep] { identity_ok_ = reference_identity(ref_, deep, identity_findings_); });
  Findings ref_findings;
  auto g = read_gguf(ref_, reference, ref_findings);
  if (g && !ref_findings.has_errors()) ref_gguf_ = std::move(g);
}

void PackValidator::check_reference(bool deep) {
  if (!ref_opened_) {
    f_.error("IO_OPEN", ref_path_, "", std::nullopt, "cannot read the reference: " + ref_open_error_);
    return;
  }
  identity_.join();
  f_.append(identity_findings_);
  if (!identity_ok_) return;
  if (!ref_gguf_) {
    f_.error("PACK_REFERENCE_INVALID", ref_path_, "", std::nullopt, "the reference is not a valid GGUF file");
    return;
  }
  for (const Findings& f : compare_found_) f_.append(f);
  check_coverage(*ref_gguf_);
  if (deep && dense_gguf_) compare_dense(ref_, *ref_gguf_);
}

}  // namespace

bool is_expert_pack(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_directory(d, ec) && fs::is_regular_file(d / kPackManifestFile, ec) &&
         (fs::exists(d / kPackExpertsFile, ec) || fs::exists(d / kPackDenseFile, ec));
}

void PackValidator::run(const std::string& reference, bool deep) {
  if (!load_manifest() || !check_names()) return;
  if (!reference.empty()) open_reference(reference, deep);
  if (check_experts_file()) {
    check_blob_geometry();
    scan_parts(true);
    if (geometry_ok_) check_padding();
  } else {
    scan_parts(false);  // no experts.bin: still each part's source range (as before)
  }
  check_dense();
  if (!reference.empty()) check_reference(deep);
}

void PackValidator::run_manifest_only(std::string_view text, const std::string& display,
                                      std::optional<uint64_t> experts_file_size) {
  if (!parse_pack_manifest(text, display, m_, f_) || !check_names()) return;
  experts_size_ = experts_file_size.value_or(m_.experts_size);
  check_blob_geometry();
}

void validate_expert_pack(const std::string& dir, const std::string& reference_gguf, bool deep, Findings& f) {
  PackValidator(dir, f).run(reference_gguf, deep);
}

void check_pack_manifest_text(std::string_view text, const std::string& display,
                              std::optional<uint64_t> experts_file_size, Findings& f) {
  PackValidator(".", f).run_manifest_only(text, display, experts_file_size);
}

}  // namespace ckpt
