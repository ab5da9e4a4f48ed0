// ggml's lookup tables for the i-quants and the 4-bit value sets (gguf.md §6), as
// generated data (ggml_tables.cpp, from tools/gen_ggml_tables.py). A grid entry packs
// its 4 or 8 magnitudes one per byte, least significant byte first.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

extern const std::array<uint8_t, 8> kmask_iq2xs;     // 1 << j
extern const std::array<uint8_t, 128> ksigns_iq2xs;  // i | parity(i) << 7
extern const std::array<uint64_t, 256> iq2xxs_grid;  // bytes in {8, 25, 43}
extern const std::array<uint64_t, 512> iq2xs_grid;
extern const std::array<uint64_t, 1024> iq2s_grid;
extern const std::array<uint32_t, 256> iq3xxs_grid;  // bytes in {4, 12, ..., 52, 62}
extern const std::array<uint32_t, 512> iq3s_grid;    // bytes in {1, 3, ..., 15}
extern const std::array<int8_t, 16> kvalues_iq4nl;
extern const std::array<int8_t, 16> kvalues_fp4;     // E2M1 doubled

struct GgmlTableHash {
  const char* name;
  const char* sha256;  // lowercase hex of the table's little-endian bytes
};
// The expected hashes embedded at generation time, one per table above.
std::span<const GgmlTableHash> ggml_table_hashes();
// SHA-256 of the embedded table `name` as it is now; "" for an unknown name.
std::string ggml_table_sha256(std::string_view name);
// Recomputes every table's hash and compares it with the embedded one; on a mismatch
// returns false with the table named in `error`. Dequantizers check this once before use.
bool ggml_tables_verified(std::string& error);

}  // namespace ckpt
