#include "core/outcome.h"

namespace ckpt {

int exit_code_for(Outcome o) {
  static constexpr int kCodes[] = {0, 1, 2, 3, 4};
  return kCodes[static_cast<int>(o)];
}

const char* outcome_name(Outcome o) {
  static constexpr const char* kNames[] = {"ok", "input_error", "usage_error", "io_error", "no_device"};
  return kNames[static_cast<int>(o)];
}

Outcome outcome_of(const Findings& f) {
  if (f.has_io_errors()) return Outcome::io;
  return f.has_errors() ? Outcome::findings : Outcome::ok;
}

Outcome worse(Outcome a, Outcome b) { return exit_code_for(a) >= exit_code_for(b) ? a : b; }

}  // namespace ckpt
