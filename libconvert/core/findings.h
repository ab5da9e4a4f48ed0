// Findings: the one currency every reader and check pays in.
//
// Readers never throw across module boundaries and never exit(); they append
// findings (stable code + severity + where + a sentence a person can act on)
// and return what they could read. The apps turn findings into text, JSON and
// an exit code in one place (apps/ckpt/exit_codes.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>
#include <string>
#include <vector>

namespace ckpt {

enum class Severity { info, warning, error };

const char* severity_name(Severity s);

struct Finding {
  std::string code;                // stable, e.g. "ST_OFFSET_GAP"; codes starting "IO_" are I/O errors
  Severity severity = Severity::error;
  std::string file;                // path as shown to the user ("" when not about one file)
  std::string tensor;              // "" when not about one tensor
  std::optional<uint64_t> offset;  // absolute byte offset in `file`, when known
  std::string message;             // one sentence, names the numbers found and required
};

// At most this many findings of one code are kept (a hostile header can repeat one
// mistake a million times); the rest are counted, so counts and exit codes stay exact.
inline constexpr size_t kMaxFindingsPerCode = 100;

// Findings of one code (and severity) that were counted but not kept.
struct OmittedFindings {
  std::string code;
  Severity severity = Severity::error;
  uint64_t count = 0;
};

class Findings {
 public:
  void add(Finding f);
  void add(std::string code, Severity sev, std::string file, std::string tensor,
           std::optional<uint64_t> offset, std::string message) {
    add(Finding{std::move(code), sev, std::move(file), std::move(tensor), offset, std::move(message)});
  }
  void error(std::string code, std::string file, std::string tensor, std::optional<uint64_t> offset,
             std::string message) {
    add(std::move(code), Severity::error, std::move(file), std::move(tensor), offset, std::move(message));
  }
  void warning(std::string code, std::string file, std::string tensor, std::optional<uint64_t> offset,
               std::string message) {
    add(std::move(code), Severity::warning, std::move(file), std::move(tensor), offset,
        std::move(message));
  }
  void info(std::string code, std::string file, std::string tensor, std::optional<uint64_t> offset,
            std::string message) {
    add(std::move(code), Severity::info, std::move(file), std::move(tensor), offset, std::move(message));
  }
  // Adds every finding of `other` (under this object's caps) and its omitted counts.
  void append(const Findings& other);
  // Counts `n` findings of `code` that are not listed (a merged report's omitted counts).
  void add_omitted(const std::string& code, Severity sev, uint64_t n);

  // The kept findings: at most kMaxFindingsPerCode per code.
  const std::vector<Finding>& items() const { return items_; }
  std::vector<Finding>& items() { return items_; }
  // The findings counted but not kept, by code then severity.
  std::vector<OmittedFindings> omitted() const;
  uint64_t omitted_count() const;
  // "... and 299900 more ST_DUPLICATE_TENSOR errors (not listed)" per omitted code.
  std::vector<std::string> omitted_lines() const;
  // Counts include the omitted findings.
  size_t count(Severity s) const;
  bool has_errors() const { return count(Severity::error) > 0; }
  bool has_io_errors() const;
  bool has_code(const std::string& code) const;
  size_t count_code(const std::string& code) const;
  // Sort by file, then offset, then code: reports are deterministic whatever the thread order.
  void sort_stable();

 private:
  std::vector<Finding> items_;
  std::unordered_map<std::string, size_t> kept_per_code_;
  std::map<std::pair<std::string, Severity>, uint64_t> omitted_;
};

}  // namespace ckpt
