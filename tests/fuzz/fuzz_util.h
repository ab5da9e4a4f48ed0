// Shared by the libFuzzer targets in this folder. A target that finds the library
// breaking one of its own promises (a tensor said to be in bounds that is not, say)
// calls fuzz_fail, which aborts: libFuzzer records the input as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace ckpt::fuzz {

[[noreturn]] inline void fuzz_fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

inline void fuzz_check(bool ok, const char* what) {
  if (!ok) fuzz_fail(what);
}

}  // namespace ckpt::fuzz
