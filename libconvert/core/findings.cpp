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

void Findings::add(Finding f) {
  size_t& kept = kept_per_code_[f.code];
  if (kept >= kMaxFindingsPerCode) {
    ++omitted_[{f.code, f.severity}];
    return;
  }
  ++kept;
  items_.push_back(std::move(f));
}

void Findings::append(const Findings& other) {
  if (&other == this) {
    const Findings copy = other;
    append(copy);
    return;
  }
  for (const auto& f : other.items_) add(f);
  for (const auto& [key, n] : other.omitted_) omitted_[key] += n;
}

void Findings::add_omitted(const std::string& code, Severity sev, uint64_t n) {
  if (n > 0) omitted_[{code, sev}] += n;
}

std::vector<OmittedFindings> Findings::omitted() const {
  std::vector<OmittedFindings> out;
  for (const auto& [key, n] : omitted_) out.push_back(OmittedFindings{key.first, key.second, n});
  return out;
}

uint64_t Findings::omitted_count() const {
  uint64_t total = 0;
  for (const auto& [key, n] : omitted_) total += n;
  return total;
}

std::vector<std::string> Findings::omitted_lines() const {
  std::vector<std::string> out;
  for (const auto& [key, n] : omitted_)
    out.push_back("... and " + std::to_string(n) + " more " + key.first + " " + severity_name(key.second) +
                  (n == 1 ? "" : "s") + " (not listed; at most " + std::to_string(kMaxFindingsPerCode) +
                  " are kept per code)");
  return out;
}

size_t Findings::count(Severity s) const {
  size_t n = static_cast<size_t>(
      std::count_if(items_.begin(), items_.end(), [s](const Finding& f) { return f.severity == s; }));
  for (const auto& [key, k] : omitted_)
    if (key.second == s) n += static_cast<size_t>(k);
  return n;
}

bool Findings::has_io_errors() const {
  return std::any_of(items_.begin(), items_.end(), [](const Finding& f) {
    return f.severity == Severity::error && f.code.rfind("IO_", 0) == 0;
  });
}

bool Findings::has_code(const std::string& code) const { return count_code(code) > 0; }

size_t Findings::count_code(const std::string& code) const {
  size_t n = static_cast<size_t>(
      std::count_if(items_.begin(), items_.end(), [&](const Finding& f) { return f.code == code; }));
  for (const auto& [key, k] : omitted_)
    if (key.first == code) n += static_cast<size_t>(k);
  return n;
}

void Findings::sort_stable() {
  std::stable_sort(items_.begin(), items_.end(), [](const Finding& a, const Finding& b) {
    uint64_t oa = a.offset.value_or(UINT64_MAX), ob = b.offset.value_or(UINT64_MAX);
    return std::tie(a.file, oa, a.tensor, a.code) < std::tie(b.file, ob, b.tensor, b.code);
  });
}

}  // namespace ckpt
