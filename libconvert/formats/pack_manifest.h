// manifest.json of an expert pack (schemas/expert-pack-manifest.schema.json), parsed into
// typed fields. Every member is bounded (offsets and sizes < 2^56, layer/expert numbers
// < 2^24, tensor names as GGUF allows), so a hostile manifest cannot size an allocation or
// an index beyond those bounds. Used by the validator, the GPU verifier and the fuzzer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/findings.h"
#include "io/hash.h"

namespace ckpt {

// The pack's fixed file names and the keys dense.gguf records the repack under.
inline constexpr const char* kPackExpertsFile = "experts.bin";
inline constexpr const char* kPackDenseFile = "dense.gguf";
inline constexpr const char* kPackManifestFile = "manifest.json";
inline constexpr const char* kPackManifestSchema = "ckptkit/expert-pack-manifest/v1";
inline constexpr const char* kRepackExpertsKey = "ckptkit.repack.experts";  // = "experts.bin"
inline constexpr const char* kRepackALogKey = "ckptkit.repack.a_log";      // = "fixed" or "kept"
inline constexpr uint64_t kRepackMinAlign = 512;                            // O_DIRECT's smallest sector
inline constexpr uint64_t kRepackMaxAlign = uint64_t{1} << 30;
inline constexpr uint64_t kPackMaxManifestBytes = uint64_t{1} << 30;

struct PackManifestPart {
  std::string tensor, type;
  int64_t type_id = -1;
  uint64_t ne0 = 0, ne1 = 0, offset = 0, size = 0, source_offset = 0;
  std::string xxh3;
};

struct PackManifestBlob {
  uint64_t layer = 0, expert = 0, offset = 0, size = 0;
  std::vector<PackManifestPart> parts;
  bool parts_ok = true;  // every part lies inside the blob, without overlaps
};

// $.source.sha256_tree (io/sha256_tree.h): optional (packs before it lack it). Parsed only
// when well formed: scheme "ckptkit-sha256-tree/v1", chunk_size a power of two within the
// tree's bounds, exactly ceil(source_size / chunk_size) chunk digests, and a root that is
// the root of those chunks.
struct PackSourceTree {
  uint64_t chunk_size = 0;
  Sha256Digest root{};
  std::vector<Sha256Digest> chunks;
};

struct PackManifest {
  uint64_t alignment = 0, source_size = 0, experts_size = 0, dense_size = 0;
  std::string a_log, source_sha256, experts_name, dense_name;
  std::optional<PackSourceTree> source_tree;
  std::vector<PackManifestBlob> blobs;
};

std::string pack_blob_name(const PackManifestBlob& b);  // "blob layer L expert E"

// Parses manifest text; every missing, mistyped or out-of-range member is a PACK_MANIFEST_FIELD
// finding naming its JSON path (PACK_MANIFEST_PARSE for text that is not JSON). `file` names the
// manifest in findings. Returns false when any error was found.
bool parse_pack_manifest(std::string_view text, const std::string& file, PackManifest& m, Findings& f);

// Reads DIR/manifest.json (at most kPackMaxManifestBytes) and parses it.
bool read_pack_manifest(const std::string& dir, PackManifest& m, Findings& f);

}  // namespace ckpt
