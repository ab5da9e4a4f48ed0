#include "core/display.h"

#include <cstdint>

namespace ckpt {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void hex_byte(std::string& out, uint8_t b) {
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 0xF];
}

// `digits` lowercase hex digits of v after `prefix`.
void hex_code(std::string& out, const char* prefix, uint32_t v, int digits) {
  out += prefix;
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) out += kHex[(v >> shift) & 0xF];
}

// One character of untrusted text: the valid UTF-8 sequence at s[i] (length 1..4 and its
// code point), or length 0 when s[i] starts none (that one byte is then escaped).
struct Utf8Char {
  size_t length = 0;
  uint32_t cp = 0;
};

Utf8Char utf8_char(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t n;
  uint32_t cp;
  if (b0 < 0x80) return {1, b0};
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1Fu;
  else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, cp = b0 & 0x0Fu;
  else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, cp = b0 & 0x07u;
  else return {};
  if (s.size() - i < n) return {};
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return {};
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return {};  // overlong / too large
  if (cp >= 0xD800 && cp <= 0xDFFF) return {};                                        // surrogate
  return {n, cp};
}

bool is_c1(uint32_t cp) { return cp >= 0x80 && cp <= 0x9F; }

bool is_hex_lower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// "\xHH" (lowercase hex) at s[i]: what json_unescape_bytes turns into one byte.
bool byte_escape_at(std::string_view s, size_t i) {
  return s.size() - i >= 4 && s[i] == '\\' && s[i + 1] == 'x' && is_hex_lower(s[i + 2]) && is_hex_lower(s[i + 3]);
}

uint8_t hex_value(char c) { return static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10); }

// A JSON \uXXXX escape of cp (a surrogate pair above U+FFFF).
void json_u_escape(std::string& out, uint32_t cp) {
  if (cp < 0x10000) {
    hex_code(out, "\\u", cp, 4);
    return;
  }
  const uint32_t v = cp - 0x10000;
  hex_code(out, "\\u", 0xD800 + (v >> 10), 4);
  hex_code(out, "\\u", 0xDC00 + (v & 0x3FF), 4);
}

}  // namespace

// The format characters (general category Cf, Unicode 15.1) and the line and paragraph
// separators: each either reorders the text around it (bidi controls) or prints nothing.
bool is_hidden_format_char(char32_t cp) {
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kRanges[] = {
      {0x00AD, 0x00AD},   {0x0600, 0x0605},   {0x061C, 0x061C},   {0x06DD, 0x06DD},   {0x070F, 0x070F},
      {0x0890, 0x0891},   {0x08E2, 0x08E2},   {0x180E, 0x180E},   {0x200B, 0x200F},   {0x2028, 0x202E},
      {0x2060, 0x2064},   {0x2066, 0x206F},   {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD},
      {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
      {0xE0020, 0xE007F},
  };
  for (const Range& r : kRanges)
    if (cp >= r.first && cp <= r.last) return true;
  return false;
}

std::string display_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = utf8_char(s, i);
    if (c.length == 0) {  // not UTF-8: the byte itself
      hex_byte(out, static_cast<uint8_t>(s[i]));
      ++i;
      continue;
    }
    if (c.cp == '\n') out += "\\n";
    else if (c.cp == '\r') out += "\\r";
    else if (c.cp == '\t') out += "\\t";
    else if (c.cp == '\\') out += "\\\\";
    else if (c.cp < 0x20 || c.cp == 0x7F) hex_byte(out, static_cast<uint8_t>(c.cp));
    else if (is_c1(c.cp)) {  // its two bytes, as before: "\xc2\x9b" for the 8-bit CSI
      hex_byte(out, static_cast<uint8_t>(s[i]));
      hex_byte(out, static_cast<uint8_t>(s[i + 1]));
    } else if (is_hidden_format_char(c.cp)) {
      if (c.cp < 0x10000) hex_code(out, "\\u", c.cp, 4);
      else hex_code(out, "\\U", c.cp, 8);
    } else {
      out.append(s.substr(i, c.length));
    }
    i += c.length;
  }
  return out;
}

std::string json_string_literal(std::string_view s, JsonText text) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = utf8_char(s, i);
    if (c.length == 0) {  // no JSON string can hold this byte: the reversible \xHH text
      out += "\\\\x";
      out += kHex[static_cast<uint8_t>(s[i]) >> 4];
      out += kHex[static_cast<uint8_t>(s[i]) & 0xF];
      ++i;
      continue;
    }
    switch (c.cp) {
      case '"': out += "\\\""; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\\':  // in safe text one that would read as a byte escape is itself escaped: \x5c
        out += text == JsonText::safe && byte_escape_at(s, i) ? "\\\\x5c" : "\\\\";
        break;
      default:
        if (c.cp < 0x20 || (text == JsonText::safe && (c.cp == 0x7F || is_c1(c.cp) || is_hidden_format_char(c.cp))))
          json_u_escape(out, c.cp);
        else
          out.append(s.substr(i, c.length));
    }
    i += c.length;
  }
  out += '"';
  return out;
}

std::string json_unescape_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (byte_escape_at(s, i)) {
      out += static_cast<char>(hex_value(s[i + 2]) << 4 | hex_value(s[i + 3]));
      i += 4;
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::string finding_line(std::string_view prog_sub, const Finding& f) {
  return std::string(prog_sub) + ": " + finding_text(f);
}

std::string finding_text(const Finding& f) {
  std::string line = severity_name(f.severity);
  line += ' ';
  line += display_escape(f.code);
  line += ' ';
  line += f.file.empty() ? std::string("-") : display_escape(f.file);
  // Appended piece by piece: `"@" + std::to_string(...)` trips GCC 12's -Wrestrict false
  // positive at -O3 (GCC bug 105329).
  if (f.offset) {
    line += '@';
    line += std::to_string(*f.offset);
  }
  if (!f.tensor.empty()) {
    line += " [";
    line += display_escape(f.tensor);
    line += ']';
  }
  line += ": ";
  line += display_escape(f.message);
  return line;
}

std::string error_line(std::string_view prog_sub, std::string_view code, std::string_view file,
                       std::string_view message) {
  Finding f;
  f.code = std::string(code);
  f.file = std::string(file);
  f.message = std::string(message);
  return finding_line(prog_sub, f);
}

}  // namespace ckpt
