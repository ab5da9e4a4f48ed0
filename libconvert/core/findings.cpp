#include "core/findings.h"

#include <algorithm>
#include <tuple>

namespace ckpt {

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::info: return "info";
    case Severity::warning: return "warning";
    case Severity::error: return "error";
  }
  return "error";
}

size_t Findings::count(Severity s) const {
  return static_cast<size_t>(
      std::count_if(items_.begin(), items_.end(), [s](const Finding& f) { return f.severity == s; }));
}

bool Findings::has_io_errors() const {
  return std::any_of(items_.begin(), items_.end(), [](const Finding& f) {
    return f.severity == Severity::error && f.code.rfind("IO_", 0) == 0;
  });
}

bool Findings::has_code(const std::string& code) const { return count_code(code) > 0; }

size_t Findings::count_code(const std::string& code) const {
  return static_cast<size_t>(
      std::count_if(items_.begin(), items_.end(), [&](const Finding& f) { return f.code == code; }));
}

void Findings::sort_stable() {
  std::stable_sort(items_.begin(), items_.end(), [](const Finding& a, const Finding& b) {
    uint64_t oa = a.offset.value_or(UINT64_MAX), ob = b.offset.value_or(UINT64_MAX);
    return std::tie(a.file, oa, a.tensor, a.code) < std::tie(b.file, ob, b.tensor, b.code);
  });
}

}  // namespace ckpt
