// The skip-or-fail rule of test_require.h.
#include "test_require.h"

#include <cstdlib>
#include <string_view>

#include <gtest/gtest.h>

namespace ckpt::test {

const char* require_variable(Need need) { return need == Need::gpu ? "CKPT_REQUIRE_GPU" : "CKPT_REQUIRE_AVX512"; }

Absence absence_verdict(Need need, const char* variable_value, const std::string& reason) {
  const std::string_view v = variable_value ? variable_value : "";
  const std::string var = require_variable(need);
  if (v.empty() || v == "0") return {false, reason + " (" + var + "=1 makes this a failure)"};
  if (v == "1") return {true, reason + ", and " + var + "=1 demands it"};
  return {true, reason + ", and " + var + "='" + std::string(v) + "' is neither 0 nor 1"};
}

void skip_or_fail_without(Need need, const std::string& reason) {
  const Absence a = absence_verdict(need, std::getenv(require_variable(need)), reason);
  // The gtest macros return from the function they are in: here the lambda, so the caller
  // decides whether to stop.
  if (a.fail)
    [&] { GTEST_FAIL() << a.message; }();
  else
    [&] { GTEST_SKIP() << a.message; }();
}

}  // namespace ckpt::test
