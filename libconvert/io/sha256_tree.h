// The SHA-256 tree of a file (scheme "ckptkit-sha256-tree/v1"): an identity as strong as
// the file's SHA-256 that, unlike it, can be checked on all cores. The file is cut into
// chunks of `chunk_size` bytes (the last one shorter; none for an empty file), n =
// ceil(size / chunk_size), and
//
//   chunk[i] = SHA-256(bytes [i * chunk_size, min((i + 1) * chunk_size, size)))
//   root     = SHA-256("ckptkit-sha256-tree/v1" || 0x00 || u64be(chunk_size) || u64be(size)
//                      || chunk[0] || ... || chunk[n - 1])
//
// (u64be: 8 bytes, big-endian; each chunk digest its 32 raw bytes). The root's input is a
// fixed-length prefix followed by n digests, n fixed by the two sizes, so it decodes to
// exactly one (chunk_size, size, digests): two files with one root either give SHA-256
// two different inputs with one output, or have equal sizes and chunk digests, hence a chunk
// of each that differs with one digest. Either way a SHA-256 collision; second preimages
// likewise. The scheme string keeps a root from ever being read as a plain file hash.
// docs/ckpt-repack-experts.md states the definition for readers of a pack's manifest.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "io/hash.h"
#include "io/input_file.h"

namespace ckpt {

inline constexpr std::string_view kSha256TreeScheme = "ckptkit-sha256-tree/v1";
inline constexpr uint64_t kSha256TreeDefaultChunk = uint64_t{64} << 20;
// Bounds a chunk size must keep (a power of two within them): a hostile manifest can
// neither divide by zero nor make a task per byte; 1 GiB chunks still give 16 tasks
// on a 16 GiB file.
inline constexpr uint64_t kSha256TreeMinChunk = uint64_t{64} << 10;
inline constexpr uint64_t kSha256TreeMaxChunk = uint64_t{1} << 30;

bool sha256_tree_chunk_size_ok(uint64_t chunk_size);  // a power of two in [min, max]
// ceil(size / chunk_size); chunk_size > 0.
uint64_t sha256_tree_chunk_count(uint64_t size, uint64_t chunk_size);

// The root over already computed chunk digests (chunks.size() must be the chunk count).
Sha256Digest sha256_tree_root(uint64_t chunk_size, uint64_t size, std::span<const Sha256Digest> chunks);

// Every chunk digest of `file` (its size at open), on all cores (oneTBB): each chunk
// hashed by one task, read with pread in blocks of at most 1 MiB (one buffer per worker,
// whatever the chunk size), the chunks taken in file order so that the reads move through
// the file front to back. `hashed` (optional) counts the bytes done. With `stop` set the
// tasks give up early (the digests are then meaningless; false is returned with an empty
// error). On a failed read: false, `error` from the failing chunk of lowest index and
// `error_offset` (optional) the offset of the block that failed.
bool sha256_tree_file(const InputFile& file, uint64_t chunk_size, std::vector<Sha256Digest>& chunks, IoError& error,
                      const std::atomic<bool>* stop = nullptr, std::atomic<uint64_t>* hashed = nullptr,
                      uint64_t* error_offset = nullptr);

}  // namespace ckpt
