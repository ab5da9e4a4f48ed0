// Rule citations (citation.h).
#include "deploy/citation.h"

#include <charconv>

#include "formats/json.h"

namespace ckpt {

namespace {

bool positive(std::string_view s, uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out > 0;
}

}  // namespace

bool Citation::has_line() const {
  const size_t dash = lines.find('-');
  uint64_t first = 0, last = 0;
  if (dash == std::string::npos) return positive(lines, first);
  return positive(std::string_view(lines).substr(0, dash), first) &&
         positive(std::string_view(lines).substr(dash + 1), last) && first <= last;
}

std::string Citation::text() const {
  if (!absent.empty()) return path + ": " + absent;
  std::string s = path + (lines.empty() ? "" : ":" + lines);
  if (!function.empty()) s += " " + function;
  if (!note.empty()) s += " (" + note + ")";
  return s;
}

Citation citation_from_json(simdjson::dom::element e) {
  Citation c;
  std::string_view plain;
  if (e.get(plain) == simdjson::SUCCESS) {
    c.note = std::string(plain);
    return c;
  }
  c.repo = json_string(e, "repo").value_or("");
  c.revision = json_string(e, "revision").value_or("");
  c.path = json_string(e, "path").value_or("");
  c.lines = json_string(e, "lines").value_or("");
  c.function = json_string(e, "function").value_or("");
  c.note = json_string(e, "note").value_or("");
  c.absent = json_string(e, "absent").value_or("");
  return c;
}

}  // namespace ckpt
