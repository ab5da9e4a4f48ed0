#include "formats/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <tbb/parallel_for.h>

#include "formats/model_files.h"
#include "io/input_file.h"

namespace ckpt {
namespace fs = std::filesystem;
namespace od = simdjson::ondemand;

namespace {

// Files a Hugging Face checkpoint directory carries beside its shards.
const char* const kSideFiles[] = {"config.json",          "generation_config.json", "tokenizer.json",
                                  "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                                  "vocab.json",           "merges.txt",
                                  "hf_quant_config.json", "params.json"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads a small JSON side file fully (bounded) into `text`.
bool read_small_file(const std::string& path, const std::string& display, uint64_t limit, std::string& text,
                     Findings& findings) {
  IoError err;
  if (!read_input_file(path, limit, text, err)) {
    if (err.err == EFBIG)
      findings.error("FILE_TOO_LARGE", display, "", std::nullopt, display + " " + err.message);
    else
      findings.error("IO_OPEN", display, "", std::nullopt, "cannot read " + display + ": " + err.message);
    return false;
  }
  return true;
}

void index_error(Findings& f, const char* code, const std::string& tensor, std::string msg) {
  f.error(code, kIndexName, tensor, std::nullopt, std::move(msg));
}

void index_json_error(Findings& f, simdjson::error_code e) {
  index_error(f, "IDX_PARSE", "", std::string("index is not valid JSON: ") + json_error_text(e));
}

bool parse_index_metadata(od::value value, CheckpointIndex& index, Findings& f) {
  od::object meta;
  if (value.get_object().get(meta)) {
    index_error(f, "IDX_PARSE", "", "index 'metadata' is not an object");
    return false;
  }
  index.metadata_present = true;
  bool seen_total = false;
  for (auto field : meta) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) {
      index_json_error(f, e);
      return false;
    }
    if (key != "total_size") {
      od::value other;
      if (auto e = field.value().get(other)) {
        index_json_error(f, e);
        return false;
      }
      if (auto e = json_validate_value(other, kJsonMaxDepth - 16)) {
        index_json_error(f, e);
        return false;
      }
      continue;
    }
    if (seen_total) {  // a second total_size: readers keep different ones
      index_error(f, "IDX_DUPLICATE_KEY", "", "index metadata lists 'total_size' twice; JSON readers keep different ones");
      return false;
    }
    seen_total = true;
    uint64_t total = 0;
    if (field.value().get_uint64().get(total)) {
      index_error(f, "IDX_TOTAL_SIZE_TYPE", "", "index metadata.total_size is not a non-negative integer");
      continue;
    }
    index.total_size = total;
  }
  return true;
}

bool parse_weight_map(od::value value, CheckpointIndex& index, Findings& f) {
  od::object map;
  if (value.get_object().get(map)) {
    index_error(f, "IDX_PARSE", "", "index 'weight_map' is not an object");
    return false;
  }
  std::unordered_set<std::string> seen;
  for (auto field : map) {
    std::string_view key, shard;
    if (auto e = field.unescaped_key().get(key)) {
      index_json_error(f, e);
      return false;
    }
    std::string name(key);
    if (field.value().get_string().get(shard)) {
      index_error(f, "IDX_PARSE", name, "weight_map entry for '" + name + "' is not a string");
      return false;
    }
    if (!seen.insert(name).second) {
      index_error(f, "IDX_DUPLICATE_KEY", name,
                  "weight_map lists '" + name + "' twice; JSON readers keep different entries");
      continue;
    }
    index.weight_map.emplace_back(std::move(name), std::string(shard));
  }
  return true;
}

// Parses model.safetensors.index.json, both the {"total_size": T} and the empty
// ("metadata": {}) forms, detecting duplicate weight_map keys in order.
void parse_index(const std::string& path, CheckpointIndex& index, Findings& f) {
  index.present = true;
  std::string text;
  if (!read_small_file(path, kIndexName, kMaxIndexBytes, text, f)) return;
  parse_index_text(text, index, f);
}

}  // namespace

void parse_index_text(std::string_view text, CheckpointIndex& index, Findings& f) {
  index.present = true;
  if (text.size() > kMaxIndexBytes) {
    index_error(f, "FILE_TOO_LARGE", "",
                std::string(kIndexName) + " is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                    std::to_string(kMaxIndexBytes));
    return;
  }
  simdjson::padded_string padded(text);
  od::parser parser;
  od::document doc;
  od::object root;
  auto fail = [&](simdjson::error_code e) { index_json_error(f, e); };
  auto end = json_value_end(text);
  if (!end || std::string_view(text).find_first_not_of(" \t\r\n", *end) != std::string_view::npos)
    return fail(simdjson::TRAILING_CONTENT);
  if (auto e = parser.iterate(padded).get(doc)) return fail(e);
  if (auto e = doc.get_object().get(root)) return fail(e);
  bool have_map = false, have_metadata = false;
  for (auto field : root) {
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) return fail(e);
    od::value value;
    if (auto e = field.value().get(value)) return fail(e);
    // A second "weight_map" or "metadata" is a parser differential: Python's json keeps
    // the last, a streaming reader the first (fuzz finding: both used to be merged).
    if ((key == "metadata" && have_metadata) || (key == "weight_map" && have_map)) {
      index_error(f, "IDX_DUPLICATE_KEY", "",
                  "index has two '" + std::string(key) + "' members; JSON readers keep different ones");
      return;
    }
    if (key == "metadata") {
      have_metadata = true;
      if (!parse_index_metadata(value, index, f)) return;
    } else if (key == "weight_map") {
      have_map = true;
      if (!parse_weight_map(value, index, f)) return;
    } else if (auto e = json_validate_value(value, kJsonMaxDepth - 16)) {
      return fail(e);
    }
  }
  if (!have_map) {
    index_error(f, "IDX_PARSE", "", "index has no 'weight_map'");
    return;
  }
  index.parsed = true;
}

namespace {

struct ShardNumber {
  unsigned index = 0, count = 0;
  std::string prefix;  // "model-" or "consolidated-"
};

// Five decimal digits at s[at, at + 5).
std::optional<unsigned> five_digits(const std::string& s, size_t at) {
  unsigned v = 0;
  for (size_t i = at; i < at + 5; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(s[i] - '0');
  }
  return v;
}

// "model-%05d-of-%05d.safetensors" (huggingface_hub's shard naming), or Mistral's native
// "consolidated-%05d-of-%05d.safetensors" (params.json layout).
std::optional<ShardNumber> parse_shard_name(const std::string& name) {
  static const std::string middle = "-of-", suffix = ".safetensors";
  for (const std::string prefix : {"model-", "consolidated-"}) {
    const size_t p = prefix.size();
    if (name.size() != p + 5 + middle.size() + 5 + suffix.size()) continue;
    if (name.compare(0, p, prefix) != 0 || name.compare(p + 5, middle.size(), middle) != 0 || !ends_with(name, suffix))
      continue;
    auto index = five_digits(name, p), count = five_digits(name, p + 9);
    if (!index || !count) return std::nullopt;
    return ShardNumber{*index, *count, prefix};
  }
  return std::nullopt;
}

// model-%05d-of-%05d.safetensors: one N everywhere, every i in 1..N present.
void check_shard_names(const std::vector<std::string>& names, Findings& f) {
  std::set<unsigned> counts;
  std::set<unsigned> present;
  std::string prefix;
  for (const auto& n : names) {
    auto num = parse_shard_name(n);
    if (!num) {
      if (names.size() > 1 && n != "model.safetensors" && n != "consolidated.safetensors")
        f.warning("SHARD_NAME_PATTERN", n, "", std::nullopt,
                  "shard name '" + n + "' does not follow model-%05d-of-%05d.safetensors");
      continue;
    }
    counts.insert(num->count);
    if (prefix.empty()) prefix = num->prefix;
    if (num->index == 0 || num->index > num->count)
      f.error("SHARD_NAME_PATTERN", n, "", std::nullopt,
              "shard number " + std::to_string(num->index) + " is outside 1.." + std::to_string(num->count));
    present.insert(num->index);
  }
  if (counts.size() > 1) {
    f.error("SHARD_SET_INCOMPLETE", "", "", std::nullopt,
            "shard names disagree on the shard count (" + std::to_string(*counts.begin()) + " vs " +
                std::to_string(*counts.rbegin()) + ")");
    return;
  }
  if (counts.size() == 1) {
    unsigned n = *counts.begin();
    for (unsigned i = 1; i <= n; ++i)
      if (!present.count(i)) {
        char buf[64];
        snprintf(buf, sizeof buf, "%s%05u-of-%05u.safetensors", prefix.c_str(), i, n);
        f.error("SHARD_SET_INCOMPLETE", buf, "", std::nullopt,
                std::string("shard ") + buf + " of the set is missing");
      }
  }
}

bool is_pickle_name(const std::string& name) {
  for (const char* ext : {".bin", ".pt", ".pth", ".pkl", ".ckpt"})
    if (ends_with(name, ext)) return true;
  return false;
}

// The directory's files by list_model_files (formats/model_files.h: the one listing, one
// link rule): top-level *.safetensors are the shards, known side files are noted. A link
// leading outside the checkpoint, a FIFO or a device among the files this reader opens
// is an error (and the file is never opened), with or without an index. .safetensors
// files in subdirectories and pickles are named in warnings; pickles are never read.
void scan_directory(const fs::path& dir, std::vector<std::string>& shard_files, Checkpoint& out, Findings& f) {
  std::vector<ModelFile> files;
  Findings listing;
  list_model_files(dir.string(), files, listing);
  auto read_here = [](const std::string& name) {
    if (name.find('/') != std::string::npos) return false;
    if (ends_with(name, ".safetensors") || name == kIndexName) return true;
    for (const char* side : kSideFiles)
      if (name == side) return true;
    return false;
  };
  for (const auto& x : listing.items())
    if (x.severity != Severity::error || read_here(x.file) || x.code == "IO_READDIR") f.add(x);
  for (const auto& mf : files) {
    const std::string& name = mf.name;
    const bool nested = name.find('/') != std::string::npos;
    if (ends_with(name, ".safetensors")) {
      if (!nested)
        shard_files.push_back(name);
      else
        f.warning("ST_NESTED_IGNORED", name, "", std::nullopt,
                  name + " lies in a subdirectory; it is not part of the checkpoint and is not read");
      continue;
    }
    if (is_pickle_name(name)) {
      f.warning("PICKLE_PRESENT", name, "", std::nullopt,
                name + " is a pickle (PyTorch .bin/.pt/.pth) beside the safetensors shards; it is not read "
                       "(never unpickled), and loaders that prefer it would not load the shards");
      continue;
    }
    if (nested) continue;
    if (name == kIndexName) out.index.present = true;
    for (const char* side : kSideFiles)
      if (name == side) out.side_files.push_back(name);
  }
  std::sort(shard_files.begin(), shard_files.end());
  std::sort(out.side_files.begin(), out.side_files.end());
}

// Decides which shard files make up the checkpoint: the index's set when there is
// one (checked against the disk), else every *.safetensors file.
std::vector<std::string> select_shards(const fs::path& dir, const std::vector<std::string>& on_disk,
                                       const CheckpointIndex& index, Findings& f) {
  if (!index.parsed) {
    if (!index.present && on_disk.size() > 1)
      f.warning("IDX_MISSING", kIndexName, "", std::nullopt,
                "directory has " + std::to_string(on_disk.size()) + " shards but no " + kIndexName +
                    "; loaders that need it will fail");
    return on_disk;
  }
  std::set<std::string> listed;
  for (const auto& [tensor, shard] : index.weight_map) {
    if (!is_plain_file_name(shard)) {
      index_error(f, "IDX_BAD_PATH", tensor,
                  "weight_map sends '" + tensor + "' to '" + shard +
                      "', which is not a plain file name inside the checkpoint directory");
      continue;
    }
    listed.insert(shard);
  }
  std::set<std::string> disk(on_disk.begin(), on_disk.end());
  std::vector<std::string> shards;
  for (const auto& s : listed) {
    std::error_code ec;
    if (!disk.count(s) && !fs::exists(dir / s, ec)) {
      f.error("IDX_SHARD_MISSING", s, "", std::nullopt,
              "the index names shard '" + s + "' but it is not in the directory");
      continue;
    }
    // A shard may be a symlink (Hub cache snapshots link into ../../blobs), but it must
    // not lead outside the checkpoint unless it is a Hub cache blob (model_files.h).
    if (link_escapes_directory(dir, dir / s)) {
      index_error(f, "IDX_PATH_ESCAPE", "", "shard '" + s + "' is a symlink leading outside the checkpoint");
      continue;
    }
    shards.push_back(s);
  }
  for (const auto& s : on_disk)
    if (!listed.count(s))
      f.error("IDX_SHARD_UNLISTED", s, "", std::nullopt,
              "shard file '" + s + "' is in the directory but the index maps no tensor to it");
  return shards;
}

void load_config(const fs::path& dir, Checkpoint& out, Findings& f) {
  std::error_code ec;
  fs::path p = dir / "config.json";
  const bool listed = std::find(out.side_files.begin(), out.side_files.end(), "config.json") != out.side_files.end();
  if (!listed && fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec)
    return;  // there, but refused by the listing (a link leading outside, a FIFO): reported
  if (!listed) {
    // Mistral's native layout: params.json takes config.json's place (read with the side files).
    if (std::find(out.side_files.begin(), out.side_files.end(), "params.json") != out.side_files.end()) return;
    f.warning("CFG_MISSING", "config.json", "", std::nullopt,
              "no config.json: model-specific checks (profiles) cannot read the architecture");
    return;
  }
  std::string text, error;
  if (!read_small_file(p.string(), "config.json", kMaxSideJsonBytes, text, f)) return;
  auto doc = std::make_unique<JsonDoc>();
  if (!doc->parse(text, error) || !doc->root().is_object()) {
    f.error("CFG_PARSE", "config.json", "", std::nullopt,
            error.empty() ? std::string("config.json is not a JSON object") : "config.json cannot be read: " + error);
    return;
  }
  out.config = std::move(doc);
  out.config_texts.emplace_back("config.json", std::move(text));
}

// Tokenizer and generation files must at least be valid JSON; the quantization side configs
// (kQuantSideConfigs) are kept, parsed (nullptr when unreadable or not a JSON object).
void check_side_json(const fs::path& dir, Checkpoint& out, Findings& f) {
  std::vector<std::pair<std::string, std::unique_ptr<JsonDoc>>> configs;
  for (const auto& name : out.side_files) {
    if (name == "config.json" || !ends_with(name, ".json")) continue;
    const bool quant_side = std::find_if(std::begin(kQuantSideConfigs), std::end(kQuantSideConfigs),
                                         [&](const char* n) { return name == n; }) != std::end(kQuantSideConfigs);
    std::string text, error;
    auto doc = std::make_unique<JsonDoc>();
    const bool read = read_small_file((dir / name).string(), name, kMaxSideJsonBytes, text, f);
    if (read && !doc->parse(text, error)) {
      f.error("SIDE_FILE_JSON", name, "", std::nullopt, name + " is not valid JSON: " + error);
      doc.reset();
    } else if (read && quant_side && !doc->root().is_object()) {
      f.error("SIDE_FILE_JSON", name, "", std::nullopt, name + " is not a JSON object");
      doc.reset();
    }
    if (!read) doc.reset();
    if (quant_side && doc) out.config_texts.emplace_back(name, std::move(text));
    if (quant_side) configs.emplace_back(name, std::move(doc));
  }
  for (const char* want : kQuantSideConfigs)
    for (auto& c : configs)
      if (c.first == want) out.side_configs.push_back(std::move(c));
}

void read_headers(std::vector<Shard>& shards, const StReadOptions& options, Findings& f) {
  std::vector<Findings> per_shard(shards.size());
  tbb::parallel_for(size_t{0}, shards.size(), [&](size_t i) {
    Shard& s = shards[i];
    IoError err;
    if (!s.file.open(s.path, err)) {
      per_shard[i].error("IO_OPEN", s.name, "", std::nullopt, "cannot read shard: " + err.message);
      return;
    }
    s.header = read_safetensors_header(s.file, s.name, options, per_shard[i]);
  });
  for (const auto& pf : per_shard) f.append(pf);
}

// Index <-> headers: every mapped tensor in its shard and nowhere else; every
// header tensor mapped; total_size equals the payload.
void cross_check_index(const Checkpoint& ck, Findings& f) {
  std::unordered_map<std::string, std::string> found_in;  // tensor -> first shard holding it
  uint64_t payload = 0;
  for (const auto& s : ck.shards) {
    if (!s.header) continue;
    for (const auto& t : s.header->tensors) {
      payload += t.nbytes;
      auto [it, inserted] = found_in.emplace(t.name, s.name);
      if (!inserted)
        f.error("CKPT_DUPLICATE_TENSOR", s.name, t.name, s.header->data_start + t.begin,
                "tensor '" + t.name + "' is in both " + it->second + " and " + s.name);
    }
  }
  if (!ck.index.parsed) return;
  std::set<std::string> readable;
  for (const auto& s : ck.shards)
    if (s.header) readable.insert(s.name);
  std::unordered_set<std::string> mapped;
  for (const auto& [tensor, shard] : ck.index.weight_map) {
    mapped.insert(tensor);
    auto it = found_in.find(tensor);
    if (it == found_in.end()) {
      if (readable.count(shard))
        index_error(f, "IDX_TENSOR_NOT_IN_SHARD", tensor,
                    "the index puts '" + tensor + "' in " + shard + " but no shard has it");
    } else if (it->second != shard) {
      index_error(f, "IDX_WRONG_SHARD", tensor,
                  "the index puts '" + tensor + "' in " + shard + " but it is in " + it->second);
    }
  }
  for (const auto& s : ck.shards) {
    if (!s.header) continue;
    for (const auto& t : s.header->tensors)
      if (!mapped.count(t.name))
        f.error("IDX_TENSOR_UNMAPPED", s.name, t.name, s.header->data_start + t.begin,
                "tensor '" + t.name + "' is in " + s.name + " but not in the index's weight_map");
  }
  bool all_read = readable.size() == ck.shards.size();
  if (ck.index.total_size && all_read && *ck.index.total_size != payload)
    index_error(f, "IDX_TOTAL_SIZE_MISMATCH", "",
                "index metadata.total_size is " + std::to_string(*ck.index.total_size) +
                    " but the shards hold " + std::to_string(payload) + " payload bytes");
}

}  // namespace

bool is_plain_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  for (unsigned char c : name)
    if (c == '/' || c == '\\' || c < 0x20 || c == 0x7f) return false;
  return true;
}

bool open_checkpoint(const std::string& path, const StReadOptions& options, Checkpoint& out, Findings& f) {
  out.root = path;
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    f.error("IO_OPEN", path, "", std::nullopt, "cannot open " + path + ": no such file or directory");
    return false;
  }
  if (!fs::is_directory(status)) {
    Shard s;
    s.name = fs::path(path).filename().string();
    s.path = path;
    out.shards.push_back(std::move(s));
    read_headers(out.shards, options, f);
    cross_check_index(out, f);
    return true;
  }
  out.is_directory = true;
  fs::path dir(path);
  std::vector<std::string> on_disk;
  scan_directory(dir, on_disk, out, f);
  // The index is read when the listing accepted it (a link leading outside or a FIFO is
  // reported there and never opened).
  if (out.index.present) parse_index((dir / kIndexName).string(), out.index, f);
  auto names = select_shards(dir, on_disk, out.index, f);
  if (names.empty() && !f.has_errors())
    f.error("CKPT_NO_SHARDS", path, "", std::nullopt, "no .safetensors files in " + path);
  check_shard_names(names, f);
  for (const auto& n : names) {
    Shard s;
    s.name = n;
    s.path = (dir / n).string();
    out.shards.push_back(std::move(s));
  }
  read_headers(out.shards, options, f);
  cross_check_index(out, f);
  load_config(dir, out, f);
  check_side_json(dir, out, f);
  return true;
}

ModelView checkpoint_view(const Checkpoint& ck) {
  ModelView view;
  view.format = ModelFormat::safetensors;
  view.config = ck.config.get();
  for (const auto& s : ck.shards) {
    auto file_index = static_cast<uint32_t>(view.files.size());
    view.files.push_back(s.name);
    view.file_paths.push_back(s.path);
    if (!s.header) continue;
    for (const auto& t : s.header->tensors) {
      ModelTensor m;
      m.name = t.name;
      m.type = dtype_name(t.dtype);
      m.dtype = t.dtype;
      m.shape = t.shape;
      m.file = file_index;
      m.offset = s.header->data_start + t.begin;
      m.nbytes = t.nbytes;
      m.payload_ok = t.sizes_ok;
      view.add(std::move(m));
    }
  }
  return view;
}

}  // namespace ckpt
