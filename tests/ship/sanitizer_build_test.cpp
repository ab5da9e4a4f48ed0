// The sanitizer build (CKPT_SANITIZE, which CKPT_FUZZ implies; make asan) runs the whole suite
// under ASan + UBSan with the Makefile's ASAN_OPTIONS. These fail when that build silently
// stops instrumenting the tests or runs them without the allocation bound, and when the
// normal build is instrumented by mistake (the corruption suite's own allocation count, which
// replaces operator new, is then off).
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "test_util.h"

namespace {

#if CKPT_TEST_SANITIZE_BUILD
// Each call is one death test's child: it must die with the sanitizer's report.
[[gnu::noinline]] void allocate_97_mib() {
  void* volatile p = std::malloc(size_t{97} << 20);
  std::free(p);
}
[[gnu::noinline]] int add_overflowing(int a) {
  volatile int b = 1;
  return a + b;
}
#endif

TEST(SanitizerBuild, AddressSanitizerIsOnExactlyInTheSanitizerBuild) {
  EXPECT_EQ(CKPT_TEST_ASAN, CKPT_TEST_SANITIZE_BUILD);
}

#if CKPT_TEST_SANITIZE_BUILD
TEST(SanitizerBuild, NoSingleAllocationAbove96MiB) {
  const char* opts = std::getenv("ASAN_OPTIONS");
  ASSERT_NE(opts, nullptr) << "run the sanitizer suite with make asan (it sets ASAN_OPTIONS)";
  EXPECT_NE(std::string(opts).find("max_allocation_size_mb=96"), std::string::npos) << opts;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(allocate_97_mib(), "allocation-size-too-big|exceeds maximum supported size");
}

TEST(SanitizerBuild, UndefinedBehaviorSanitizerHaltsOnSignedOverflow) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  volatile int big = INT_MAX;
  EXPECT_DEATH(add_overflowing(big), "signed integer overflow");
}
#endif

}  // namespace
