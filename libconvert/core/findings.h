// Findings: the one currency every reader and check pays in.
//
// Readers never throw across module boundaries and never exit(); they append
// findings (stable code + severity + where + a sentence a person can act on)
// and return what they could read. The apps turn findings into text, JSON and
// an exit code in one place (apps/ckpt/exit_codes.h).
#pragma once

#include <cstdint>
#include <optional>
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

class Findings {
 public:
  void add(Finding f) { items_.push_back(std::move(f)); }
  void add(std::string code, Severity sev, std::string file, std::string tensor,
           std::optional<uint64_t> offset, std::string message) {
    items_.push_back(Finding{std::move(code), sev, std::move(file), std::move(tensor), offset,
                             std::move(message)});
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
  void append(const Findings& other) { items_.insert(items_.end(), other.items_.begin(), other.items_.end()); }

  const std::vector<Finding>& items() const { return items_; }
  std::vector<Finding>& items() { return items_; }
  size_t count(Severity s) const;
  bool has_errors() const { return count(Severity::error) > 0; }
  bool has_io_errors() const;
  bool has_code(const std::string& code) const;
  size_t count_code(const std::string& code) const;
  // Sort by file, then offset, then code: reports are deterministic whatever the thread order.
  void sort_stable();

 private:
  std::vector<Finding> items_;
};

}  // namespace ckpt
