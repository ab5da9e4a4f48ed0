// What a test does when this machine lacks what it needs (a GPU, AVX-512): skip with the
// reason shown, or fail where the machine is meant to have it. A GPU host runs its device
// suites with CKPT_REQUIRE_GPU=1 (tools/gpu_check.sh sets it), an AVX-512 host may set
// CKPT_REQUIRE_AVX512=1: there a missing device or ISA is a failure, never a quiet pass.
#pragma once

#include <string>

namespace ckpt::test {

enum class Need { gpu, avx512 };

// The environment variable that demands `need` (CKPT_REQUIRE_GPU, CKPT_REQUIRE_AVX512).
const char* require_variable(Need need);

// The decision alone, from the variable's value (null when unset), for the tests of this
// rule: unset, "" or "0" skip; "1" fails; any other value fails too, naming it (a typo in
// a demand must not pass as no demand).
struct Absence {
  bool fail = false;
  std::string message;  // the reason, and for a failure the variable that demanded it
};
Absence absence_verdict(Need need, const char* variable_value, const std::string& reason);

// Records the verdict for the running test (from the environment): a skip, or a fatal
// failure. It does not return from the caller: `return skip_or_fail_without(...)` in a test
// body or SetUp ends it (gtest runs no body after a skip or a fatal failure in SetUp); a
// check that goes on after it (the AVX2 half of a test whose AVX-512 half cannot run)
// calls it and continues, and the test is reported skipped or failed with the reason.
void skip_or_fail_without(Need need, const std::string& reason);

}  // namespace ckpt::test
