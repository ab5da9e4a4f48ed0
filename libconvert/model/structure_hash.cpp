#include "model/structure_hash.h"

#include <algorithm>
#include <cstdio>

#include <openssl/evp.h>

namespace ckpt {
namespace {

void append_u_escape(std::string& out, uint32_t unit) {
  char buf[16];  // "\\uXXXX" needs 7; room for the compiler's worst case of a 32-bit value
  std::snprintf(buf, sizeof buf, "\\u%04x", unit & 0xFFFFu);
  out += buf;
}

// Decodes one UTF-8 sequence at s[i]; returns its length, or 0 when invalid
// (overlong, surrogate, beyond U+10FFFF, truncated).
size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b0 = byte(i);
  size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (len == 0 || b0 > 0xF4 || i + len > s.size()) return 0;
  cp = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

void append_ascii_char(std::string& out, unsigned char c) {
  switch (c) {
    case '"': out += "\\\""; return;
    case '\\': out += "\\\\"; return;
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\b': out += "\\b"; return;
    case '\f': out += "\\f"; return;
    default:
      if (c < 0x20 || c == 0x7F) {
        append_u_escape(out, c);
      } else {
        out += static_cast<char>(c);
      }
  }
}

void append_record(std::string& out, const StructureRecord& r) {
  out += "{\"dtype\":";
  out += json_quote_ascii(r.dtype);
  out += ",\"name\":";
  out += json_quote_ascii(r.name);
  out += ",\"shape\":[";
  for (size_t i = 0; i < r.shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(r.shape[i]);
  }
  out += "],\"size_bytes\":";
  out += std::to_string(r.size_bytes);
  out += '}';
}

}  // namespace

std::string json_quote_ascii(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      append_ascii_char(out, c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t len = decode_utf8(s, i, cp);
    if (len == 0) {  // Python could not have decoded this name; keep the hash defined
      append_u_escape(out, 0xFFFD);
      ++i;
      continue;
    }
    if (cp >= 0x10000) {
      cp -= 0x10000;
      append_u_escape(out, 0xD800 + (cp >> 10));
      append_u_escape(out, 0xDC00 + (cp & 0x3FF));
    } else {
      append_u_escape(out, cp);
    }
    i += len;
  }
  return out + "\"";
}

std::string structure_json(std::vector<StructureRecord> records) {
  std::sort(records.begin(), records.end(),
            [](const StructureRecord& a, const StructureRecord& b) { return a.name < b.name; });
  std::string out = "[";
  out.reserve(records.size() * 110 + 4);
  for (size_t i = 0; i < records.size(); ++i) {
    if (i) out += ',';
    append_record(out, records[i]);
  }
  out += "]\n";
  return out;
}

std::string structure_sha256(std::vector<StructureRecord> records) {
  std::string text = structure_json(std::move(records));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr) != 1) return "";
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 15];
  }
  return hex;
}

}  // namespace ckpt
