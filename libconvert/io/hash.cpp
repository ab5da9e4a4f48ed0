#include "io/hash.h"

#include <algorithm>
#include <cstdio>

#include <openssl/evp.h>
#include <xxhash.h>

#include "io/read_ahead.h"

namespace ckpt {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(std::span<const uint8_t> bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(impl_->ctx, bytes.data(), bytes.size());
}

Sha256Digest Sha256::digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, md, &len);
  Sha256Digest d{};
  std::copy(md, md + std::min<size_t>(len, d.size()), d.begin());
  return d;
}

std::string Sha256::hex_digest() { return sha256_hex(digest()); }

std::string sha256_hex(const Sha256Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * d.size());
  for (uint8_t b : d) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

bool parse_sha256_hex(std::string_view hex, Sha256Digest& out) {
  if (hex.size() != 2 * out.size()) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  Sha256Digest d{};
  for (size_t i = 0; i < d.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    d[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  out = d;
  return true;
}

std::string sha256_hex(std::string_view text) {
  Sha256 h;
  h.update(text);
  return h.hex_digest();
}

bool sha256_file(const MappedFile& file, std::string& hex, std::string& error, size_t block_bytes, unsigned buffers) {
  Sha256 h;
  ReadAheadOptions o;
  o.block_bytes = block_bytes;
  o.buffers = buffers;
  ReadAhead reader(file, std::move(o));
  for (uint64_t pos = 0; pos < file.size();) {
    const uint64_t n = std::min<uint64_t>(reader.block_bytes(), file.size() - pos);
    std::span<const uint8_t> bytes;
    if (!reader.read(pos, n, bytes, error)) return false;
    h.update(bytes);
    pos += n;
  }
  if (!reader.finish(error)) return false;
  hex = h.hex_digest();
  return true;
}

Xxh3::Xxh3() : state_(XXH3_createState()) { reset(); }
Xxh3::~Xxh3() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3::reset() { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }
void Xxh3::update(std::span<const uint8_t> bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}
uint64_t Xxh3::digest() const { return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)); }

std::string xxh3_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool is_hex_digest(std::string_view s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  return true;
}

}  // namespace ckpt
