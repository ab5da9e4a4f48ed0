// Hash manifests (`ckpt hash`, schemas/hash-manifest.schema.json): per tensor the hash
// of its stored bytes (and with dequant, of its f32 values, hashman/decode.h), per file
// the hash of the whole file, and one whole-model hash that does not depend on how the
// tensors are laid out in shards. For a directory the files are every file of the model
// directory (formats/model_files.h: config.json, the index, tokenizer files, ... too),
// so `hash --check` fails when any of them changes, goes missing or appears.
//
// Whole-model hash (per algorithm): the hash of the concatenation, over tensors sorted
// by name (bytewise), of one line per tensor
//   {"name":N,"type":T,"shape":[...],"bytes":B,"hash":H}\n
// (compact JSON, keys in that order, H the tensor's raw-bytes hash in the same algorithm).
// With dequant, model.f32_<algo> is the same with H the f32 hash ("" where the type has no
// f32 form).
//
// Reading: every file is read once, in order, with pread in 1 MiB steps into a per-thread
// buffer (files in parallel over oneTBB); each step feeds the file's hash and the hash of
// the tensor it belongs to, so payload memory is threads x 1 MiB.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/findings.h"
#include "formats/loader.h"
#include "formats/model_view.h"

namespace ckpt {

inline constexpr const char* kHashManifestSchema = "ckptkit/hash-manifest/v1";

// What `ckpt hash` reads: a safetensors checkpoint directory or file, a GGUF file, or an
// expert pack (repack-experts output: every blob part of experts.bin is a tensor named
// "TENSOR#E" (E = expert), plus dense.gguf's tensors; manifest.json is one more file).
struct HashSource {
  std::string kind;  // "safetensors", "gguf", "expert-pack"
  std::unique_ptr<LoadedModel> model;  // the checkpoint, or the pack's dense.gguf
  // The tensors and files to hash: the files holding tensors first, then (for a
  // directory) every other file of it, without tensors. Names are relative paths.
  ModelView view;
};

// Returns false (with findings; IO_* codes for I/O errors) when PATH cannot be read.
bool open_hash_source(const std::string& path, HashSource& out, Findings& findings);

struct HashAlgos {
  bool xxh3 = true;
  bool sha256 = false;
};

struct ManifestTensor {
  std::string name, type, file;
  std::vector<uint64_t> shape;
  uint64_t bytes = 0;
  std::string xxh3, sha256;          // raw bytes ("" when not computed)
  std::string f32_xxh3, f32_sha256;  // f32 values (dequant)
  std::string f32_unsupported;       // dequant: why there is no f32 form
};

struct ManifestFile {
  std::string name;
  uint64_t size = 0;
  std::string xxh3, sha256;
  // Without file hashes, a file holding tensors carries the hash of its header instead:
  // the bytes before its first tensor payload (a GGUF's key-values and tensor infos, a
  // safetensors file's JSON header with __metadata__), which no tensor hash covers.
  bool has_header = false;
  uint64_t header_bytes = 0;
  std::string header_xxh3, header_sha256;
};

struct HashManifest {
  std::string format;  // "safetensors", "gguf", "expert-pack"
  HashAlgos algos;
  bool dequant = false;
  bool file_hashes = true;  // false: files holding tensors carry name and size only
  uint64_t tensor_count = 0, tensor_bytes = 0;
  std::string model_xxh3, model_sha256, model_f32_xxh3, model_f32_sha256;
  std::vector<ManifestFile> files;      // sorted by name
  std::vector<ManifestTensor> tensors;  // sorted by name
};

struct HashOptions {
  HashAlgos algos;
  bool dequant = false;
  // false: no per-file hashes for the files holding tensors; every tensor is then read on
  // its own, all in parallel (one SHA-256 pass over the payload instead of two with --algo
  // sha256), and each such file's header (ManifestFile::header_*) is hashed on its own.
  // Files without tensors are always hashed whole: nothing else covers them.
  bool file_hashes = true;
  std::function<void(uint64_t bytes)> on_progress;  // bytes just read (any thread)
};

// Reads every file of `src` once and fills `out`. Unreadable files or tensors become
// IO_READ findings (their hashes stay ""); returns false when any happened.
bool build_hash_manifest(const HashSource& src, const HashOptions& options, HashManifest& out, Findings& findings);

// The model-level hashes from the tensor list (sorted by name), as defined above.
void compute_model_hashes(HashManifest& m);

// Deterministic JSON (no paths, no timestamps, no version), one file / tensor per line.
std::string hash_manifest_json(const HashManifest& m);

// Limits of parse_hash_manifest.
inline constexpr uint64_t kMaxHashManifestBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxManifestEntries = uint64_t{1} << 24;
inline constexpr uint64_t kMaxManifestNameBytes = 4096;
inline constexpr uint64_t kMaxManifestDims = 64;

// Parses a manifest from `text` (pure: no I/O; allocation bounded by the text size and
// the limits above). `label` names the manifest in findings (HASHMAN_* codes, each naming
// the JSON path of the bad member). Returns false when the manifest is unusable.
bool parse_hash_manifest(std::string_view text, const std::string& label, HashManifest& out, Findings& findings);

}  // namespace ckpt
