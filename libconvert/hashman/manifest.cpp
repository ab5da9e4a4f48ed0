#include "hashman/manifest.h"

#include <cerrno>

#include "io/input_file.h"

#include <algorithm>
#include <initializer_list>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "core/checked_math.h"
#include "core/display.h"
#include "core/ggml_types.h"
#include "formats/json.h"
#include "formats/model_files.h"
#include "model/value_codec.h"
#include "io/hash.h"
#include "io/mapped_file.h"
#include "io/read_ahead.h"
#include "repack/expert_pack.h"
#include "repack/pack_validate.h"
#include "formats/json_writer.h"

namespace ckpt {
namespace {

// Every check runs (each reports its own finding) in order; true when all passed. Unlike
// `&` on bools, initializer-list elements are evaluated left to right, so findings come in
// a fixed order.
bool all_of(std::initializer_list<bool> results) {
  return std::all_of(results.begin(), results.end(), [](bool r) { return r; });
}

namespace fs = std::filesystem;

constexpr uint64_t kStepBytes = 1u << 20;             // one pread, hashed while in cache
constexpr uint64_t kMaxPackManifestBytes = 1u << 30;  // as pack_validate.cpp
constexpr uint64_t kMaxPackBytes = uint64_t{1} << 56;

std::string base_name(const std::string& path) { return fs::path(path).filename().string(); }

// ---------------------------------------------------------------- expert packs

bool read_text_file(const std::string& path, uint64_t limit, std::string& out, std::string& error) {
  IoError err;
  if (!read_input_file(path, limit, out, err)) {
    error = err.err == EFBIG ? err.message : "cannot read: " + err.message;
    return false;
  }
  return true;
}

std::optional<uint64_t> u64_member(simdjson::dom::element e, const char* key) {
  auto v = json_get(e, key);
  uint64_t x = 0;
  if (!v || v->get_uint64().get(x) || x > kMaxPackBytes) return std::nullopt;
  return x;
}

bool plain_name(const std::string& n) {
  return !n.empty() && n.size() <= 255 && n != "." && n != ".." && n.find('/') == std::string::npos &&
         n.find('\\') == std::string::npos && n.find('\0') == std::string::npos;
}

// The blob parts of an expert pack as tensors of file 0 (experts.bin); dense.gguf's
// tensors follow as file 1. Only what hashing needs is read from the manifest; every
// range is checked against experts.bin's size (`ckpt validate` checks the rest).
bool open_pack(const std::string& dir, HashSource& out, Findings& f) {
  const std::string mpath = (fs::path(dir) / kPackManifestFile).string();
  std::string text, error;
  if (!read_text_file(mpath, kMaxPackManifestBytes, text, error)) {
    f.error("IO_READ", kPackManifestFile, "", std::nullopt, kPackManifestFile + std::string(" ") + error);
    return false;
  }
  JsonDoc doc;
  if (!doc.parse(text, error)) {
    f.error("HASHMAN_PACK_MANIFEST", kPackManifestFile, "", std::nullopt, "not valid JSON: " + error);
    return false;
  }
  auto bad = [&](const std::string& why) {
    f.error("HASHMAN_PACK_MANIFEST", kPackManifestFile, "", std::nullopt, why);
    return false;
  };
  auto experts_obj = json_get(doc.root(), "experts_file");
  auto dense_obj = json_get(doc.root(), "dense_file");
  std::optional<std::string> experts_name = experts_obj ? json_string(*experts_obj, "name") : std::nullopt;
  std::optional<std::string> dense_name = dense_obj ? json_string(*dense_obj, "name") : std::nullopt;
  if (!experts_name || !plain_name(*experts_name) || !dense_name || !plain_name(*dense_name))
    return bad("experts_file.name / dense_file.name missing or not plain file names");
  const std::string experts_path = (fs::path(dir) / *experts_name).string();
  const std::string dense_path = (fs::path(dir) / *dense_name).string();
  std::error_code ec;
  const uint64_t experts_size = fs::file_size(experts_path, ec);
  if (ec) {
    f.error("IO_OPEN", *experts_name, "", std::nullopt, "cannot read: " + ec.message());
    return false;
  }
  out.model = std::make_unique<LoadedModel>();
  if (!load_model(dense_path, StReadOptions{}, *out.model, f) || f.has_errors()) return false;
  out.kind = "expert-pack";
  out.view = ModelView{};
  out.view.format = ModelFormat::gguf;
  out.view.files = {*experts_name, *dense_name};
  out.view.file_paths = {experts_path, dense_path};
  simdjson::dom::array blobs;
  auto blobs_v = json_get(doc.root(), "blobs");
  if (!blobs_v || blobs_v->get_array().get(blobs)) return bad("blobs is missing or not an array");
  size_t bi = 0;
  for (auto b : blobs) {
    const std::string where = "blobs[" + std::to_string(bi++) + "]";
    auto expert = u64_member(b, "expert");
    auto boff = u64_member(b, "offset");
    simdjson::dom::array parts;
    auto parts_v = json_get(b, "parts");
    if (!expert || !boff || !parts_v || parts_v->get_array().get(parts)) return bad(where + ": expert/offset/parts");
    size_t pi = 0;
    for (auto p : parts) {
      const std::string pw = where + ".parts[" + std::to_string(pi++) + "]";
      auto tensor = json_string(p, "tensor");
      auto poff = u64_member(p, "offset");
      auto size = u64_member(p, "size");
      auto type_id = u64_member(p, "type_id");
      auto ne = json_int_array(p, "ne");
      if (!tensor || tensor->empty() || tensor->size() > 255 || !poff || !size || !type_id || !ne ||
          *type_id >= static_cast<uint64_t>(kGgmlTypeCount))
        return bad(pw + ": tensor/offset/size/type_id/ne missing or out of range");
      ModelTensor t;
      // The pack's JSON writer escaped bytes that are not UTF-8 reversibly (core/display.h).
      t.name = json_unescape_bytes(*tensor) + "#" + std::to_string(*expert);
      t.ggml_type = static_cast<int32_t>(*type_id);
      t.type = ggml_type_name(t.ggml_type);
      for (int64_t d : *ne) {
        if (d < 0) return bad(pw + ".ne holds a negative value");
        t.shape.push_back(static_cast<uint64_t>(d));
      }
      t.file = 0;
      t.offset = *boff + *poff;  // both below 2^56: no overflow
      t.nbytes = *size;
      t.payload_ok = t.offset <= experts_size && t.nbytes <= experts_size - t.offset;
      if (!t.payload_ok)
        f.error("HASHMAN_PACK_RANGE", *experts_name, t.name, t.offset,
                "part bytes [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) + ") lie outside " +
                    *experts_name + " (" + std::to_string(experts_size) + " bytes)");
      if (out.view.find(t.name)) return bad(pw + ": duplicate part " + t.name);
      out.view.add(std::move(t));
    }
  }
  for (ModelTensor t : out.model->view.tensors) {
    t.file = 1;
    out.view.add(std::move(t));
  }
  return !f.has_errors();
}

// ---------------------------------------------------------------- hashing

struct Hashers {
  std::optional<Xxh3> xxh3;
  std::optional<Sha256> sha256;
  void start(const HashAlgos& a) {
    if (a.xxh3) xxh3.emplace();
    if (a.sha256) sha256.emplace();
  }
  void update(std::span<const uint8_t> b) {
    if (xxh3) xxh3->update(b);
    if (sha256) sha256->update(b);
  }
  void finish(std::string& x, std::string& s) {
    if (xxh3) x = xxh3_hex(xxh3->digest());
    if (sha256) s = sha256->hex_digest();
  }
};

std::span<uint8_t> step_buffer() {
  thread_local std::vector<uint8_t> buffer(kStepBytes);
  return buffer;
}

std::span<float> f32_buffer(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return std::span<float>(buffer.data(), n);
}

// One tensor's hashes, fed step by step (steps hold whole decode units).
class TensorHasher {
 public:
  TensorHasher(const ModelTensor& t, const HashOptions& o, ManifestTensor& out) : o_(o), out_(out) {
    raw_.start(o.algos);
    if (o.dequant) {
      codec_ = value_codec(t);
      if (codec_.ok && t.nbytes % codec_.unit_bytes != 0) {
        codec_.ok = false;
        codec_.why_not = std::to_string(t.nbytes) + " bytes is not a whole number of " +
                         std::to_string(codec_.unit_bytes) + "-byte units";
      }
      if (codec_.ok) f32_.start(o.algos);
    }
  }
  uint64_t step() const {
    const uint64_t unit = o_.dequant && codec_.ok ? codec_.unit_bytes : 1;
    return std::max<uint64_t>(unit, kStepBytes - kStepBytes % unit);
  }
  void update(std::span<const uint8_t> bytes) {
    raw_.update(bytes);
    if (!o_.dequant || !codec_.ok) return;
    auto values = f32_buffer(bytes.size() / codec_.unit_bytes * codec_.unit_values);
    std::string error;
    if (!decode_values(codec_, bytes, values, error)) {
      codec_.ok = false;
      codec_.why_not = error;
      return;
    }
    f32_.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4));
  }
  void finish() {
    raw_.finish(out_.xxh3, out_.sha256);
    if (!o_.dequant) return;
    if (codec_.ok)
      f32_.finish(out_.f32_xxh3, out_.f32_sha256);
    else
      out_.f32_unsupported = codec_.why_not;
  }

 private:
  const HashOptions& o_;
  ManifestTensor& out_;
  Hashers raw_, f32_;
  ValueCodec codec_;
};

bool read_step(const MappedFile& mf, uint64_t off, uint64_t n, std::span<const uint8_t>& out, std::string& error) {
  auto buf = step_buffer();
  IoError err;
  if (!mf.read_at(off, buf.subspan(0, n), err)) {
    error = err.message;
    return false;
  }
  out = buf.subspan(0, n);
  return true;
}

// A tensor that overlaps an earlier one in its file (never in a valid file, but an
// expert pack's manifest could say so) is hashed on its own.
bool hash_tensor_alone(const MappedFile& mf, const ModelTensor& t, const HashOptions& o, ManifestTensor& out,
                       std::string& error) {
  TensorHasher h(t, o, out);
  const uint64_t step = h.step();
  for (uint64_t done = 0; done < t.nbytes;) {
    const uint64_t n = std::min(step, t.nbytes - done);
    std::span<const uint8_t> bytes;
    if (!read_step(mf, t.offset + done, n, bytes, error)) return false;
    h.update(bytes);
    done += n;
    if (o.on_progress) o.on_progress(n);
  }
  h.finish();
  return true;
}

// The file once, in order: a reader thread preads it ahead (io/read_ahead.h), the file's
// hashes run over every byte on a thread of their own, and this thread feeds each step to
// the tensor it is in, so the per-file and per-tensor SHA-256 of one byte run on two cores.
void hash_file(const MappedFile& mf, const ModelView& view, const std::vector<uint32_t>& tensors,
               const HashOptions& o, std::vector<ManifestTensor>& tout, ManifestFile& fout, std::string& error,
               std::vector<uint32_t>& overlapping) {
  Hashers file;  // outlives the reader: its tap thread feeds it
  file.start(o.algos);
  ReadAheadOptions ro;
  ro.tap = [&file](std::span<const uint8_t> bytes) { file.update(bytes); };
  ReadAhead reader(mf, std::move(ro));
  uint64_t pos = 0;
  auto skip_to = [&](uint64_t end) {  // bytes only the file hashes need
    if (end > pos && o.on_progress) o.on_progress(end - pos);
    pos = std::max(pos, end);
  };
  for (uint32_t i : tensors) {
    const ModelTensor& t = view.tensors[i];
    if (t.offset < pos) {
      overlapping.push_back(i);
      continue;
    }
    skip_to(t.offset);
    TensorHasher h(t, o, tout[i]);
    const uint64_t step = h.step();  // whole units, <= kStepBytes < the read-ahead block
    for (uint64_t done = 0; done < t.nbytes;) {
      const uint64_t n = std::min(step, t.nbytes - done);
      std::span<const uint8_t> bytes;
      if (!reader.read(pos, n, bytes, error)) return;
      h.update(bytes);
      pos += n;
      done += n;
      if (o.on_progress) o.on_progress(n);
    }
    h.finish();
  }
  skip_to(mf.size());
  if (!reader.finish(error)) return;
  file.finish(fout.xxh3, fout.sha256);
}

// `exact`: the record bytes of valid UTF-8 names are what they always were, so model hashes
// of earlier manifests still check.
// Bytes [0, end) of a file, for the header hash of a file whose tensors are hashed alone.
bool hash_header(const MappedFile& mf, uint64_t end, const HashAlgos& algos, ManifestFile& out, std::string& error) {
  Hashers h;
  h.start(algos);
  for (uint64_t done = 0; done < end;) {
    const uint64_t n = std::min(kStepBytes, end - done);
    std::span<const uint8_t> bytes;
    if (!read_step(mf, done, n, bytes, error)) return false;
    h.update(bytes);
    done += n;
  }
  h.finish(out.header_xxh3, out.header_sha256);
  out.has_header = true;
  out.header_bytes = end;
  return true;
}

void append_record(std::string& out, const ManifestTensor& t, const std::string& hash) {
  JsonWriter w(JsonText::exact);
  w.begin_object().key("name").value(t.name).key("type").value(t.type).key("shape").begin_array();
  for (uint64_t d : t.shape) w.value(d);
  w.end_array().key("bytes").value(t.bytes).key("hash").value(hash).end_object();
  out += w.str();
  out += '\n';
}

template <typename Field>
std::string model_hash(const std::vector<ManifestTensor>& tensors, Field field, bool sha) {
  std::string records;
  std::vector<const ManifestTensor*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  Xxh3 x;
  Sha256 s;
  for (const ManifestTensor* t : sorted) {
    records.clear();
    append_record(records, *t, field(*t));
    if (sha)
      s.update(records);
    else
      x.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(records.data()), records.size()));
  }
  return sha ? s.hex_digest() : xxh3_hex(x.digest());
}

// Every other file of the model directory (config.json, the index, tokenizer files, a
// pack's manifest.json, ...) joins the view as a file without tensors: nothing else covers
// its bytes, so `hash --check` must see it change, go missing or appear.
void add_side_files(const std::string& dir, ModelView& view, Findings& f) {
  std::vector<ModelFile> listed;
  list_model_files(dir, listed, f);
  const std::set<std::string> have(view.files.begin(), view.files.end());
  for (const auto& mf : listed) {
    if (have.count(mf.name)) continue;
    view.files.push_back(mf.name);
    view.file_paths.push_back(mf.path);
  }
}

}  // namespace

bool open_hash_source(const std::string& path, HashSource& out, Findings& findings) {
  std::error_code ec;
  if (fs::is_directory(path, ec) && is_expert_pack(path)) {
    if (!open_pack(path, out, findings)) return false;
    add_side_files(path, out.view, findings);
    return !findings.has_errors();
  }
  out.model = std::make_unique<LoadedModel>();
  if (!load_model(path, StReadOptions{}, *out.model, findings)) return false;
  out.kind = out.model->format == ModelFormat::gguf ? "gguf" : "safetensors";
  out.view.format = out.model->view.format;
  out.view.file_paths = out.model->view.file_paths;
  for (const auto& p : out.view.file_paths) out.view.files.push_back(base_name(p));
  out.view.tensors = out.model->view.tensors;
  out.view.by_name = out.model->view.by_name;
  if (out.model->format == ModelFormat::safetensors && out.model->checkpoint.is_directory)
    add_side_files(path, out.view, findings);
  return !findings.has_errors();
}

void compute_model_hashes(HashManifest& m) {
  m.tensor_count = m.tensors.size();
  m.tensor_bytes = 0;
  for (const auto& t : m.tensors) m.tensor_bytes += t.bytes;
  m.model_xxh3 = m.algos.xxh3 ? model_hash(m.tensors, [](const ManifestTensor& t) { return t.xxh3; }, false) : "";
  m.model_sha256 = m.algos.sha256 ? model_hash(m.tensors, [](const ManifestTensor& t) { return t.sha256; }, true) : "";
  m.model_f32_xxh3 = m.dequant && m.algos.xxh3
                         ? model_hash(m.tensors, [](const ManifestTensor& t) { return t.f32_xxh3; }, false)
                         : "";
  m.model_f32_sha256 = m.dequant && m.algos.sha256
                           ? model_hash(m.tensors, [](const ManifestTensor& t) { return t.f32_sha256; }, true)
                           : "";
}

bool build_hash_manifest(const HashSource& src, const HashOptions& o, HashManifest& m, Findings& findings) {
  const ModelView& view = src.view;
  m = HashManifest{};
  m.format = src.kind;
  m.algos = o.algos;
  m.dequant = o.dequant;
  m.file_hashes = o.file_hashes;
  std::vector<ManifestTensor> tensors(view.tensors.size());
  for (size_t i = 0; i < view.tensors.size(); ++i) {
    const ModelTensor& t = view.tensors[i];
    tensors[i].name = t.name;
    tensors[i].type = t.type;
    tensors[i].shape = t.shape;
    tensors[i].bytes = t.nbytes;
    tensors[i].file = view.files[t.file];
  }
  std::vector<ManifestFile> files(view.files.size());
  std::vector<std::unique_ptr<MappedFile>> maps(view.files.size());
  std::vector<std::vector<uint32_t>> tensors_of(view.files.size());
  std::vector<std::string> errors(view.files.size());
  std::vector<std::vector<uint32_t>> overlapping(view.files.size());
  // A file no tensor lies in (config, index, tokenizer, ...) is hashed even without file
  // hashes: nothing else covers its bytes.
  std::vector<bool> holds_tensors(view.files.size(), false);
  for (const ModelTensor& t : view.tensors) holds_tensors[t.file] = true;
  const auto tensor_files = static_cast<size_t>(std::count(holds_tensors.begin(), holds_tensors.end(), true));
  auto hash_whole = [&](size_t f) { return o.file_hashes || !holds_tensors[f]; };
  bool ok = true;
  for (size_t f = 0; f < view.files.size(); ++f) {
    files[f].name = view.files[f];
    IoError err;
    auto mf = std::make_unique<MappedFile>();
    if (!mf->open(view.file_paths[f], err)) {
      findings.error("IO_OPEN", view.files[f], "", std::nullopt, "cannot read: " + err.message);
      ok = false;
      continue;
    }
    files[f].size = mf->size();
    mf->advise_sequential();
    maps[f] = std::move(mf);
  }
  for (uint32_t i = 0; i < view.tensors.size(); ++i) {
    const ModelTensor& t = view.tensors[i];
    if (!t.payload_ok || !maps[t.file] || t.offset > maps[t.file]->size() ||
        t.nbytes > maps[t.file]->size() - t.offset) {
      if (maps[t.file]) {
        findings.error("IO_READ", view.files[t.file], t.name, t.offset, "payload lies outside the file; not hashed");
        ok = false;
      }
      continue;
    }
    tensors_of[t.file].push_back(i);
  }
  for (auto& list : tensors_of)
    std::sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return view.tensors[a].offset != view.tensors[b].offset ? view.tensors[a].offset < view.tensors[b].offset : a < b;
    });
  // Enough files for every core: each file is read once, in order, feeding its own hash
  // and its tensors'. Otherwise (one big GGUF, or no file hashes) tensors are independent
  // tasks spread over all cores, and each file hash is one more task reading its file.
  const bool per_file = o.file_hashes && tensor_files >= static_cast<size_t>(tbb::this_task_arena::max_concurrency());
  if (!per_file) {
    std::vector<uint32_t> all;
    for (auto& list : tensors_of) all.insert(all.end(), list.begin(), list.end());
    std::vector<size_t> whole;  // the files hashed as a whole, each one more task
    for (size_t f = 0; f < view.files.size(); ++f)
      if (hash_whole(f)) whole.push_back(f);
    const size_t nfiles = whole.size();
    // Files whose tensors are hashed alone: their header up to the first payload, one task each.
    std::vector<size_t> headed;
    for (size_t f = 0; f < view.files.size(); ++f)
      if (!hash_whole(f) && maps[f]) headed.push_back(f);
    const size_t nheads = headed.size();
    const std::vector<uint32_t> none;
    std::vector<std::string> tensor_errors(all.size());
    tbb::parallel_for(size_t{0}, nfiles + nheads + all.size(), [&](size_t k) {
      if (k < nfiles) {
        const size_t f = whole[k];
        if (maps[f]) hash_file(*maps[f], view, none, o, tensors, files[f], errors[f], overlapping[f]);
        return;
      }
      if (k < nfiles + nheads) {
        const size_t f = headed[k - nfiles];
        const uint64_t end = tensors_of[f].empty() ? maps[f]->size() : view.tensors[tensors_of[f].front()].offset;
        hash_header(*maps[f], end, o.algos, files[f], errors[f]);
        return;
      }
      k -= nheads;
      const uint32_t i = all[k - nfiles];
      hash_tensor_alone(*maps[view.tensors[i].file], view.tensors[i], o, tensors[i], tensor_errors[k - nfiles]);
    }, tbb::simple_partitioner());
    for (size_t k = 0; k < all.size(); ++k)
      if (!tensor_errors[k].empty() && errors[view.tensors[all[k]].file].empty())
        errors[view.tensors[all[k]].file] = tensor_errors[k];
  } else {
    tbb::parallel_for(size_t{0}, view.files.size(), [&](size_t f) {
      if (!maps[f]) return;
      hash_file(*maps[f], view, tensors_of[f], o, tensors, files[f], errors[f], overlapping[f]);
      for (uint32_t i : overlapping[f])
        if (errors[f].empty()) hash_tensor_alone(*maps[f], view.tensors[i], o, tensors[i], errors[f]);
    }, tbb::simple_partitioner());
  }
  for (size_t f = 0; f < view.files.size(); ++f)
    if (!errors[f].empty()) {
      findings.error("IO_READ", view.files[f], "", std::nullopt, "read failed: " + errors[f]);
      ok = false;
    }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  m.files = std::move(files);
  m.tensors = std::move(tensors);
  compute_model_hashes(m);
  return ok;
}

// ---------------------------------------------------------------- JSON out

namespace {

void hash_members(JsonWriter& w, const std::string& x, const std::string& s) {
  if (!x.empty()) w.key("xxh3").value(x);
  if (!s.empty()) w.key("sha256").value(s);
}

}  // namespace

std::string hash_manifest_json(const HashManifest& m) {
  std::string out = "{\n";
  auto line = [&](const std::string& key, const std::string& json, bool comma = true) {
    out += "  " + json_string_literal(key) + ": " + json + (comma ? ",\n" : "\n");
  };
  line("schema", json_string_literal(kHashManifestSchema));
  line("format", json_string_literal(m.format));
  {
    JsonWriter w;
    w.begin_array();
    if (m.algos.xxh3) w.value("xxh3");
    if (m.algos.sha256) w.value("sha256");
    w.end_array();
    line("algorithms", w.str());
  }
  line("dequant", m.dequant ? "true" : "false");
  line("file_hashes", m.file_hashes ? "true" : "false");
  {
    JsonWriter w;
    w.begin_object().key("tensor_count").value(m.tensor_count).key("bytes").value(m.tensor_bytes);
    hash_members(w, m.model_xxh3, m.model_sha256);
    if (!m.model_f32_xxh3.empty()) w.key("f32_xxh3").value(m.model_f32_xxh3);
    if (!m.model_f32_sha256.empty()) w.key("f32_sha256").value(m.model_f32_sha256);
    w.end_object();
    line("model", w.str());
  }
  out += "  \"files\": [";
  for (size_t i = 0; i < m.files.size(); ++i) {
    const auto& f = m.files[i];
    JsonWriter w;
    w.begin_object().key("name").value(f.name).key("size").value(f.size);
    hash_members(w, f.xxh3, f.sha256);
    if (f.has_header) {
      w.key("header_bytes").value(f.header_bytes);
      if (!f.header_xxh3.empty()) w.key("header_xxh3").value(f.header_xxh3);
      if (!f.header_sha256.empty()) w.key("header_sha256").value(f.header_sha256);
    }
    w.end_object();
    out += (i ? ",\n    " : "\n    ") + w.str();
  }
  out += m.files.empty() ? "],\n" : "\n  ],\n";
  out += "  \"tensors\": [";
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& t = m.tensors[i];
    JsonWriter w;
    w.begin_object().key("name").value(t.name).key("type").value(t.type).key("shape").begin_array();
    for (uint64_t d : t.shape) w.value(d);
    w.end_array().key("bytes").value(t.bytes).key("file").value(t.file);
    hash_members(w, t.xxh3, t.sha256);
    if (!t.f32_xxh3.empty()) w.key("f32_xxh3").value(t.f32_xxh3);
    if (!t.f32_sha256.empty()) w.key("f32_sha256").value(t.f32_sha256);
    if (!t.f32_unsupported.empty()) w.key("f32_unsupported").value(t.f32_unsupported);
    w.end_object();
    out += (i ? ",\n    " : "\n    ") + w.str();
  }
  out += m.tensors.empty() ? "]\n" : "\n  ]\n";
  out += "}\n";
  return out;
}

// ---------------------------------------------------------------- JSON in

namespace {

// A name of kMaxManifestNameBytes bytes, each written as the 4-character \xHH escape.
constexpr uint64_t kMaxEscapedNameBytes = 4 * kMaxManifestNameBytes;

// Strict reader: every member typed and bounded, unknown members rejected, each
// problem a HASHMAN_FIELD finding naming its JSON path.
class ManifestParser {
 public:
  ManifestParser(const std::string& label, Findings& f) : label_(label), f_(f) {}
  bool parse(simdjson::dom::element root, HashManifest& m);

 private:
  bool bad(const std::string& path, const std::string& why) {
    if (errors_++ < 16) f_.error("HASHMAN_FIELD", label_, "", std::nullopt, "manifest member " + path + " " + why);
    return false;
  }
  bool only_keys(simdjson::dom::element obj, const std::string& path, std::initializer_list<std::string_view> keys) {
    simdjson::dom::object o;
    if (obj.get_object().get(o)) return bad(path, "is not an object");
    for (auto field : o) {
      if (std::find(keys.begin(), keys.end(), field.key) == keys.end())
        return bad(path + "." + std::string(field.key.substr(0, 64)), "is not a known member");
    }
    return true;
  }
  bool str(simdjson::dom::element obj, const std::string& path, const char* key, std::string& out, bool required,
           uint64_t max_len = kMaxManifestNameBytes) {
    auto v = json_get(obj, key);
    if (!v) return required ? bad(path + "." + key, "is missing") : true;
    std::string_view s;
    if (v->get_string().get(s)) return bad(path + "." + key, "is not a string");
    if (s.size() > max_len) return bad(path + "." + key, "is longer than " + std::to_string(max_len) + " bytes");
    out = std::string(s);
    return true;
  }
  bool u64(simdjson::dom::element obj, const std::string& path, const char* key, uint64_t& out) {
    auto v = json_get(obj, key);
    if (!v) return bad(path + "." + key, "is missing");
    if (v->get_uint64().get(out)) return bad(path + "." + key, "is not a non-negative integer");
    return true;
  }
  bool hex(simdjson::dom::element obj, const std::string& path, const char* key, size_t len, std::string& out) {
    if (!str(obj, path, key, out, false, 64)) return false;
    if (out.empty() && !json_get(obj, key)) return true;
    if (out.size() != len || !std::all_of(out.begin(), out.end(), [](char c) {
          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        }))
      return bad(path + "." + key, "is not " + std::to_string(len) + " lowercase hex digits");
    return true;
  }
  bool hashes(simdjson::dom::element obj, const std::string& path, std::string& x, std::string& s) {
    return all_of({hex(obj, path, "xxh3", 16, x), hex(obj, path, "sha256", 64, s)});
  }
  bool require_algos(const std::string& path, const std::string& x, const std::string& s, const HashAlgos& a) {
    if (a.xxh3 && x.empty()) return bad(path + ".xxh3", "is missing (algorithms lists xxh3)");
    if (a.sha256 && s.empty()) return bad(path + ".sha256", "is missing (algorithms lists sha256)");
    if (!a.xxh3 && !x.empty()) return bad(path + ".xxh3", "is present but algorithms does not list xxh3");
    if (!a.sha256 && !s.empty()) return bad(path + ".sha256", "is present but algorithms does not list sha256");
    return true;
  }
  bool read_file(simdjson::dom::element e, const std::string& path, ManifestFile& f);
  bool check_file_hashes(const HashManifest& m);
  bool read_tensor(simdjson::dom::element e, const std::string& path, const HashManifest& m, ManifestTensor& t);

  std::string label_;
  Findings& f_;
  size_t errors_ = 0;
};

bool ManifestParser::read_file(simdjson::dom::element e, const std::string& path, ManifestFile& f) {
  if (!only_keys(e, path, {"name", "size", "xxh3", "sha256", "header_bytes", "header_xxh3", "header_sha256"}))
    return false;
  bool ok = all_of({str(e, path, "name", f.name, true, kMaxEscapedNameBytes), u64(e, path, "size", f.size),
                    hashes(e, path, f.xxh3, f.sha256),
                    hex(e, path, "header_xxh3", 16, f.header_xxh3), hex(e, path, "header_sha256", 64, f.header_sha256)});
  f.has_header = json_get(e, "header_bytes").has_value();
  if (ok && f.has_header) ok = u64(e, path, "header_bytes", f.header_bytes);
  if (ok && f.has_header && f.header_bytes > f.size) ok = bad(path + ".header_bytes", "is larger than size");
  if (ok && !f.has_header && (!f.header_xxh3.empty() || !f.header_sha256.empty()))
    ok = bad(path, "has header hashes but no header_bytes");
  if (ok && f.name.empty()) ok = bad(path + ".name", "is empty");
  f.name = json_unescape_bytes(f.name);  // the bytes hash_manifest_json wrote (core/display.h)
  if (ok && f.name.size() > kMaxManifestNameBytes)
    ok = bad(path + ".name", "is longer than " + std::to_string(kMaxManifestNameBytes) + " bytes");
  return ok;
}

// Files carry every algorithm's hash, except tensor files without file_hashes (name and
// size only): a file no tensor lies in always carries them (build_hash_manifest).
bool ManifestParser::check_file_hashes(const HashManifest& m) {
  std::set<std::string> tensor_files;
  for (const auto& t : m.tensors) tensor_files.insert(t.file);
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    const bool hashed = m.file_hashes || !tensor_files.count(f.name);
    if (!require_algos("$.files[" + std::to_string(i) + "]", f.xxh3, f.sha256, hashed ? m.algos : HashAlgos{false, false}))
      return false;
    if (f.has_header && !require_algos("$.files[" + std::to_string(i) + "].header", f.header_xxh3, f.header_sha256, m.algos))
      return false;
  }
  return true;
}

bool ManifestParser::read_tensor(simdjson::dom::element e, const std::string& path, const HashManifest& m,
                                 ManifestTensor& t) {
  if (!only_keys(e, path, {"name", "type", "shape", "bytes", "file", "xxh3", "sha256", "f32_xxh3", "f32_sha256",
                           "f32_unsupported"}))
    return false;
  bool ok = all_of({str(e, path, "name", t.name, true, kMaxEscapedNameBytes), str(e, path, "type", t.type, true, 64),
                    str(e, path, "file", t.file, true, kMaxEscapedNameBytes), u64(e, path, "bytes", t.bytes), hashes(e, path, t.xxh3, t.sha256),
                    hex(e, path, "f32_xxh3", 16, t.f32_xxh3), hex(e, path, "f32_sha256", 64, t.f32_sha256),
                    str(e, path, "f32_unsupported", t.f32_unsupported, false)});
  auto shape = json_get(e, "shape");
  simdjson::dom::array dims;
  if (!shape || shape->get_array().get(dims)) {
    ok = bad(path + ".shape", "is missing or not an array");
  } else if (dims.size() > kMaxManifestDims) {
    ok = bad(path + ".shape", "has more than " + std::to_string(kMaxManifestDims) + " dims");
  } else {
    for (auto d : dims) {
      uint64_t x = 0;
      if (d.get_uint64().get(x)) {
        ok = bad(path + ".shape", "holds a value that is not a non-negative integer");
        break;
      }
      t.shape.push_back(x);
    }
  }
  if (!ok) return false;
  if (t.name.empty()) return bad(path + ".name", "is empty");
  t.name = json_unescape_bytes(t.name);  // the bytes hash_manifest_json wrote (core/display.h)
  t.file = json_unescape_bytes(t.file);
  if (t.name.size() > kMaxManifestNameBytes || t.file.size() > kMaxManifestNameBytes)
    return bad(path, "has a name or file longer than " + std::to_string(kMaxManifestNameBytes) + " bytes");
  if (!require_algos(path, t.xxh3, t.sha256, m.algos)) return false;
  if (!m.dequant && (!t.f32_xxh3.empty() || !t.f32_sha256.empty() || !t.f32_unsupported.empty()))
    return bad(path, "has f32 members but dequant is false");
  if (m.dequant && t.f32_unsupported.empty()) {
    HashAlgos f32 = m.algos;
    if (!require_algos(path + ".f32", t.f32_xxh3, t.f32_sha256, f32)) return false;
  }
  return true;
}

bool ManifestParser::parse(simdjson::dom::element root, HashManifest& m) {
  if (!only_keys(root, "$", {"schema", "format", "algorithms", "dequant", "file_hashes", "model", "files", "tensors"})) return false;
  std::string schema;
  if (!str(root, "$", "schema", schema, true, 64)) return false;
  if (schema != kHashManifestSchema) return bad("$.schema", "is '" + schema + "', expected '" + kHashManifestSchema + "'");
  if (!str(root, "$", "format", m.format, true, 32)) return false;
  if (m.format != "safetensors" && m.format != "gguf" && m.format != "expert-pack")
    return bad("$.format", "is '" + m.format + "', expected safetensors, gguf or expert-pack");
  auto algos = json_get(root, "algorithms");
  simdjson::dom::array list;
  if (!algos || algos->get_array().get(list)) return bad("$.algorithms", "is missing or not an array");
  m.algos = HashAlgos{false, false};
  for (auto a : list) {
    std::string_view s;
    if (a.get_string().get(s)) return bad("$.algorithms", "holds a non-string");
    if (s == "xxh3" && !m.algos.xxh3) m.algos.xxh3 = true;
    else if (s == "sha256" && !m.algos.sha256) m.algos.sha256 = true;
    else return bad("$.algorithms", "holds '" + std::string(s.substr(0, 64)) + "' (expected xxh3, sha256, each once)");
  }
  if (!m.algos.xxh3 && !m.algos.sha256) return bad("$.algorithms", "is empty");
  auto dq = json_get(root, "dequant");
  if (!dq || dq->get_bool().get(m.dequant)) return bad("$.dequant", "is missing or not a boolean");
  auto fh = json_get(root, "file_hashes");
  if (!fh || fh->get_bool().get(m.file_hashes)) return bad("$.file_hashes", "is missing or not a boolean");
  auto model = json_get(root, "model");
  if (!model) return bad("$.model", "is missing");
  if (!only_keys(*model, "$.model", {"tensor_count", "bytes", "xxh3", "sha256", "f32_xxh3", "f32_sha256"})) return false;
  bool ok = all_of({u64(*model, "$.model", "tensor_count", m.tensor_count), u64(*model, "$.model", "bytes", m.tensor_bytes),
                    hashes(*model, "$.model", m.model_xxh3, m.model_sha256),
                    hex(*model, "$.model", "f32_xxh3", 16, m.model_f32_xxh3),
                    hex(*model, "$.model", "f32_sha256", 64, m.model_f32_sha256)});
  if (!ok || !require_algos("$.model", m.model_xxh3, m.model_sha256, m.algos)) return false;
  simdjson::dom::array files, tensors;
  auto fv = json_get(root, "files");
  auto tv = json_get(root, "tensors");
  if (!fv || fv->get_array().get(files)) return bad("$.files", "is missing or not an array");
  if (!tv || tv->get_array().get(tensors)) return bad("$.tensors", "is missing or not an array");
  if (files.size() > kMaxManifestEntries || tensors.size() > kMaxManifestEntries)
    return bad("$", "lists more than " + std::to_string(kMaxManifestEntries) + " files or tensors");
  std::set<std::string> seen;
  size_t i = 0;
  for (auto e : files) {
    ManifestFile f;
    const std::string path = "$.files[" + std::to_string(i++) + "]";
    if (!read_file(e, path, f)) return false;
    if (!seen.insert(f.name).second) return bad(path + ".name", "repeats '" + f.name + "'");
    m.files.push_back(std::move(f));
  }
  seen.clear();
  i = 0;
  for (auto e : tensors) {
    ManifestTensor t;
    const std::string path = "$.tensors[" + std::to_string(i++) + "]";
    if (!read_tensor(e, path, m, t)) return false;
    if (!seen.insert(t.name).second) return bad(path + ".name", "repeats '" + t.name + "'");
    m.tensors.push_back(std::move(t));
  }
  if (m.tensor_count != m.tensors.size())
    return bad("$.model.tensor_count", "is " + std::to_string(m.tensor_count) + " but tensors lists " +
                                           std::to_string(m.tensors.size()));
  return check_file_hashes(m);
}

}  // namespace

bool parse_hash_manifest(std::string_view text, const std::string& label, HashManifest& out, Findings& findings) {
  out = HashManifest{};
  if (text.size() > kMaxHashManifestBytes) {
    findings.error("HASHMAN_TOO_LARGE", label, "", std::nullopt,
                   "manifest is " + std::to_string(text.size()) + " bytes, above the limit " +
                       std::to_string(kMaxHashManifestBytes));
    return false;
  }
  JsonDoc doc;
  std::string error;
  if (!doc.parse(text, error)) {
    findings.error("HASHMAN_JSON", label, "", std::nullopt, "manifest is not valid JSON: " + error);
    return false;
  }
  ManifestParser p(label, findings);
  HashManifest m;
  if (!p.parse(doc.root(), m)) return false;
  out = std::move(m);
  return true;
}

}  // namespace ckpt
