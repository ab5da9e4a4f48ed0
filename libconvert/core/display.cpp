#include "core/display.h"

#include <cstdint>

namespace ckpt {
namespace {

void hex_byte(std::string& out, uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 0xF];
}

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 when it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t n;
  uint32_t cp;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) n = 2, cp = b0 & 0x1Fu;
  else if (b0 >= 0xE0 && b0 <= 0xEF) n = 3, cp = b0 & 0x0Fu;
  else if (b0 >= 0xF0 && b0 <= 0xF4) n = 4, cp = b0 & 0x07u;
  else return 0;
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;  // overlong / too large
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;                                        // surrogate
  if (cp >= 0x80 && cp <= 0x9F) return 0;                                            // C1 control: escaped
  return n;
}

}  // namespace

std::string display_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      if (b == '\n') out += "\\n";
      else if (b == '\r') out += "\\r";
      else if (b == '\t') out += "\\t";
      else if (b == '\\') out += "\\\\";
      else if (b < 0x20 || b == 0x7F) hex_byte(out, b);
      else out += static_cast<char>(b);
      ++i;
      continue;
    }
    const size_t n = utf8_length(s, i);
    if (n == 0) {
      hex_byte(out, b);
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
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
