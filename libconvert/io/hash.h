// Streaming hashes: SHA-256 (OpenSSL EVP, uses SHA-NI where the CPU has it)
// and XXH3-64. Hex output is lowercase; XXH3 is printed big-endian (canonical).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text) {
    update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  std::string hex_digest();  // finalizes
  Sha256Digest digest();     // finalizes: the 32 raw bytes

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256_hex(std::string_view text);
std::string sha256_hex(const Sha256Digest& d);  // 64 lowercase hex digits
// Exactly 64 lowercase hex digits (the schemas' ^[0-9a-f]{64}$) into `out`; false otherwise.
bool parse_sha256_hex(std::string_view hex, Sha256Digest& out);

class InputFile;
// SHA-256 of a whole file, a reader thread preading it ahead in blocks of block_bytes
// (io/read_ahead.h) while this thread hashes. False with `error` on an I/O error.
bool sha256_file(const InputFile& file, std::string& hex, std::string& error, size_t block_bytes = size_t{4} << 20,
                 unsigned buffers = 3);

class Xxh3 {
 public:
  Xxh3();
  ~Xxh3();
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;
  void reset();
  void update(std::span<const uint8_t> bytes);
  uint64_t digest() const;

 private:
  void* state_;  // XXH3_state_t, kept opaque so xxhash.h stays out of headers
};

std::string xxh3_hex(uint64_t h);
bool is_hex_digest(std::string_view s, size_t len);

}  // namespace ckpt
