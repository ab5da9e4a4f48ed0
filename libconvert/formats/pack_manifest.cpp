#include "formats/pack_manifest.h"

#include <cerrno>

#include "io/input_file.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>

#include "core/display.h"
#include "core/ggml_types.h"
#include "formats/gguf.h"
#include "formats/json.h"
#include "io/hash.h"
#include "io/sha256_tree.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxBytes = uint64_t{1} << 56;   // any offset or size in a pack (64 PiB)
constexpr uint64_t kMaxIndex = uint64_t{1} << 24;   // layer and expert numbers

// Every check runs (each reports its own finding); true when all passed. Initializer-list
// elements are evaluated in order (so findings come in a fixed order), and none is skipped
// as with &&.
bool all_of(std::initializer_list<bool> results) {
  return std::all_of(results.begin(), results.end(), [](bool r) { return r; });
}

// A GGUF tensor name as the reader accepts it: 1..63 bytes, no control characters.
bool is_tensor_name(const std::string& name) {
  if (name.empty() || name.size() > kGgufMaxNameLength) return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

// Reads the manifest into typed fields; every missing, mistyped or out-of-range member is
// a PACK_MANIFEST_FIELD finding naming its JSON path.
class ManifestReader {
 public:
  ManifestReader(const std::string& file, Findings& f) : file_(file), f_(f) {}
  bool read(simdjson::dom::element root, PackManifest& m);

 private:
  bool bad(const std::string& path, const std::string& why) {
    f_.error("PACK_MANIFEST_FIELD", file_, "", std::nullopt, "manifest member " + path + " " + why);
    return false;
  }
  std::optional<simdjson::dom::element> member(simdjson::dom::element obj, const std::string& path, const char* key) {
    auto v = json_get(obj, key);
    if (!v) bad(path + "." + key, "is missing");
    return v;
  }
  bool u64(simdjson::dom::element obj, const std::string& path, const char* key, uint64_t max, uint64_t& out) {
    auto v = member(obj, path, key);
    if (!v) return false;
    uint64_t x = 0;
    if (v->get_uint64().get(x)) return bad(path + "." + key, "is not a non-negative integer");
    if (x > max) return bad(path + "." + key, "is " + std::to_string(x) + ", above the bound " + std::to_string(max));
    out = x;
    return true;
  }
  bool str(simdjson::dom::element obj, const std::string& path, const char* key, std::string& out) {
    auto v = member(obj, path, key);
    if (!v) return false;
    std::string_view s;
    if (v->get_string().get(s)) return bad(path + "." + key, "is not a string");
    out = json_unescape_bytes(s);  // the bytes json_string_literal wrote (a GGUF name may hold any)
    return true;
  }
  bool array(simdjson::dom::element obj, const std::string& path, const char* key, simdjson::dom::array& out) {
    auto v = member(obj, path, key);
    if (!v) return false;
    if (v->get_array().get(out)) return bad(path + "." + key, "is not an array");
    return true;
  }
  bool object(simdjson::dom::element obj, const std::string& path, const char* key, simdjson::dom::element& out) {
    auto v = member(obj, path, key);
    if (!v) return false;
    if (!v->is_object()) return bad(path + "." + key, "is not an object");
    out = *v;
    return true;
  }
  bool read_files(simdjson::dom::element root, PackManifest& m);
  bool read_source_tree(simdjson::dom::element source, uint64_t source_size, PackSourceTree& t);
  bool read_layers(simdjson::dom::element root);
  bool read_blob(simdjson::dom::element e, const std::string& path, PackManifestBlob& b);
  bool read_part(simdjson::dom::element e, const std::string& path, PackManifestPart& p);

  std::string file_;
  Findings& f_;
};

bool ManifestReader::read_part(simdjson::dom::element e, const std::string& path, PackManifestPart& p) {
  if (!e.is_object()) return bad(path, "is not an object");
  bool ok = all_of({str(e, path, "tensor", p.tensor),
                    str(e, path, "type", p.type),
                    str(e, path, "xxh3", p.xxh3),
                    u64(e, path, "offset", kMaxBytes, p.offset),
                    u64(e, path, "size", kMaxBytes, p.size),
                    u64(e, path, "source_offset", kMaxBytes, p.source_offset)});
  uint64_t type_id = 0;
  ok &= u64(e, path, "type_id", kGgmlTypeCount - 1, type_id);
  p.type_id = static_cast<int64_t>(type_id);
  simdjson::dom::array ne;
  if (array(e, path, "ne", ne)) {
    std::vector<uint64_t> dims;
    for (auto d : ne) {
      uint64_t x = 0;
      if (d.get_uint64().get(x) || x == 0 || x > kMaxBytes) return bad(path + ".ne", "holds a value that is not in 1..2^56");
      dims.push_back(x);
    }
    if (dims.size() != 2) return bad(path + ".ne", "has " + std::to_string(dims.size()) + " dims, expected 2 (one expert's slice)");
    p.ne0 = dims[0];
    p.ne1 = dims[1];
  } else {
    ok = false;
  }
  if (ok && !is_tensor_name(p.tensor)) return bad(path + ".tensor", "is not a GGUF tensor name (1..63 bytes, no control characters)");
  if (ok && !is_hex_digest(p.xxh3, 16)) return bad(path + ".xxh3", "is not 16 lowercase hex digits");
  return ok;
}

bool ManifestReader::read_blob(simdjson::dom::element e, const std::string& path, PackManifestBlob& b) {
  if (!e.is_object()) return bad(path, "is not an object");
  bool ok = all_of({u64(e, path, "layer", kMaxIndex, b.layer),
                    u64(e, path, "expert", kMaxIndex, b.expert),
                    u64(e, path, "offset", kMaxBytes, b.offset),
                    u64(e, path, "size", kMaxBytes, b.size)});
  simdjson::dom::array parts;
  if (!array(e, path, "parts", parts)) return false;
  size_t i = 0;
  for (auto pe : parts) {
    PackManifestPart p;
    ok &= read_part(pe, path + ".parts[" + std::to_string(i++) + "]", p);
    b.parts.push_back(std::move(p));
  }
  if (ok && b.parts.empty()) return bad(path + ".parts", "is empty");
  return ok;
}

bool ManifestReader::read_files(simdjson::dom::element root, PackManifest& m) {
  simdjson::dom::element source, experts, dense;
  if (!object(root, "$", "source", source) || !object(root, "$", "experts_file", experts) ||
      !object(root, "$", "dense_file", dense)) {
    return false;
  }
  std::string path, name;
  // The source is named by its whole-file SHA-256, its SHA-256 tree, or both (a pack made
  // with --no-source-sha256 has the tree alone); a manifest with neither names no source.
  const bool has_sha256 = json_get(source, "sha256").has_value();
  const bool has_tree = json_get(source, "sha256_tree").has_value();
  bool ok = all_of({str(source, "$.source", "path", path),
                    str(source, "$.source", "name", name),
                    (!has_sha256 && has_tree) || str(source, "$.source", "sha256", m.source_sha256),
                    u64(source, "$.source", "size", kMaxBytes, m.source_size)});
  ok = all_of({ok, str(experts, "$.experts_file", "name", m.experts_name),
               u64(experts, "$.experts_file", "size", kMaxBytes, m.experts_size)});
  ok = all_of({ok, str(dense, "$.dense_file", "name", m.dense_name),
               u64(dense, "$.dense_file", "size", kMaxBytes, m.dense_size)});
  if (ok && has_sha256 && !is_hex_digest(m.source_sha256, 64))
    ok = bad("$.source.sha256", "is not 64 lowercase hex digits");
  if (has_tree) {
    PackSourceTree tree;
    // Its chunk count follows from source.size: only checked against a size that parsed.
    if (ok && read_source_tree(source, m.source_size, tree)) {
      m.source_tree = std::move(tree);
    } else {
      ok = false;
    }
  }
  return ok;
}

// Optional (packs written before it lack it); when present every member must hold, so a
// validator never trusts half a tree. The chunk count is compared before any digest is
// kept, and the root must be the root of the chunks listed.
bool ManifestReader::read_source_tree(simdjson::dom::element source, uint64_t source_size, PackSourceTree& t) {
  const std::string path = "$.source.sha256_tree";
  simdjson::dom::element tree;
  if (!object(source, "$.source", "sha256_tree", tree)) return false;
  std::string scheme, root;
  simdjson::dom::array chunks;
  if (!all_of({str(tree, path, "scheme", scheme), u64(tree, path, "chunk_size", kMaxBytes, t.chunk_size),
               str(tree, path, "root", root), array(tree, path, "chunks", chunks)})) {
    return false;
  }
  if (scheme != kSha256TreeScheme)
    return bad(path + ".scheme", "is '" + scheme + "', expected '" + std::string(kSha256TreeScheme) + "'");
  if (!sha256_tree_chunk_size_ok(t.chunk_size)) {
    return bad(path + ".chunk_size", "is " + std::to_string(t.chunk_size) + ", not a power of two in [" +
                                         std::to_string(kSha256TreeMinChunk) + ", " + std::to_string(kSha256TreeMaxChunk) + "]");
  }
  if (!parse_sha256_hex(root, t.root)) return bad(path + ".root", "is not 64 lowercase hex digits");
  const uint64_t expected = sha256_tree_chunk_count(source_size, t.chunk_size);
  const uint64_t listed = chunks.size();
  if (listed != expected) {
    return bad(path + ".chunks", "has " + std::to_string(listed) + " digests, but " + std::to_string(source_size) +
                                     " source bytes in chunks of " + std::to_string(t.chunk_size) + " make " +
                                     std::to_string(expected));
  }
  t.chunks.reserve(static_cast<size_t>(listed));
  size_t i = 0;
  for (auto c : chunks) {
    std::string_view hex;
    Sha256Digest d{};
    if (c.get_string().get(hex) || !parse_sha256_hex(hex, d))
      return bad(path + ".chunks[" + std::to_string(i) + "]", "is not 64 lowercase hex digits");
    t.chunks.push_back(d);
    ++i;
  }
  if (sha256_tree_root(t.chunk_size, source_size, t.chunks) != t.root)
    return bad(path + ".root", "is not the root of the listed chunks (" + std::string(kSha256TreeScheme) + ")");
  return true;
}

// Layers are descriptive (strides, reasons); check their shape, the blobs carry the data.
bool ManifestReader::read_layers(simdjson::dom::element root) {
  simdjson::dom::array layers;
  if (!array(root, "$", "layers", layers)) return false;
  bool ok = true;
  size_t i = 0;
  for (auto l : layers) {
    const std::string path = "$.layers[" + std::to_string(i++) + "]";
    if (!l.is_object()) return bad(path, "is not an object");
    uint64_t n = 0;
    simdjson::dom::array a;
    ok = all_of({ok, u64(l, path, "layer", kMaxIndex, n), u64(l, path, "expert_count", kMaxIndex, n),
                 array(l, path, "parts", a), array(l, path, "repack_reasons", a)});
  }
  return ok;
}

bool ManifestReader::read(simdjson::dom::element root, PackManifest& m) {
  if (!root.is_object()) return bad("$", "is not an object");
  std::string schema;
  if (!str(root, "$", "schema", schema)) return false;
  if (schema != kPackManifestSchema) return bad("$.schema", "is '" + schema + "', expected '" + kPackManifestSchema + "'");
  simdjson::dom::element tool;
  bool ok = all_of({object(root, "$", "tool", tool),
                    read_files(root, m),
                    read_layers(root),
                    u64(root, "$", "alignment", kRepackMaxAlign, m.alignment),
                    str(root, "$", "a_log", m.a_log)});
  if (ok && m.a_log != "fixed" && m.a_log != "kept") ok = bad("$.a_log", "is '" + m.a_log + "', expected fixed or kept");
  simdjson::dom::array blobs;
  if (!array(root, "$", "blobs", blobs)) return false;
  size_t i = 0;
  for (auto be : blobs) {
    PackManifestBlob b;
    ok &= read_blob(be, "$.blobs[" + std::to_string(i++) + "]", b);
    m.blobs.push_back(std::move(b));
  }
  return ok;
}

}  // namespace

std::string pack_blob_name(const PackManifestBlob& b) {
  return "blob layer " + std::to_string(b.layer) + " expert " + std::to_string(b.expert);
}

bool parse_pack_manifest(std::string_view text, const std::string& file, PackManifest& m, Findings& f) {
  if (text.size() > kPackMaxManifestBytes) {
    f.error("PACK_MANIFEST_PARSE", file, "", std::nullopt, "manifest is larger than 1 GiB");
    return false;
  }
  JsonDoc doc;
  std::string error;
  if (!doc.parse(text, error)) {
    f.error("PACK_MANIFEST_PARSE", file, "", std::nullopt, "manifest is not valid JSON: " + error);
    return false;
  }
  return ManifestReader(file, f).read(doc.root(), m);
}

bool read_pack_manifest(const std::string& dir, PackManifest& m, Findings& f) {
  const std::string file = (fs::path(dir) / kPackManifestFile).string();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    f.error("PACK_MANIFEST_MISSING", file, "", std::nullopt, "the pack has no " + std::string(kPackManifestFile));
    return false;
  }
  std::string text;
  IoError err;
  if (!read_input_file(file, kPackMaxManifestBytes, text, err)) {
    if (err.err == EFBIG)
      f.error("PACK_MANIFEST_PARSE", file, "", std::nullopt, "manifest is larger than 1 GiB");
    else
      f.error("IO_READ", file, "", std::nullopt, "cannot read " + file + ": " + err.message);
    return false;
  }
  return parse_pack_manifest(text, file, m, f);
}

}  // namespace ckpt
