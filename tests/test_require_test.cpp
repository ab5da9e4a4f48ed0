// test_require.h: a missing GPU or AVX-512 is a visible skip, or a failure where the
// environment demands it. The decision is tested directly (this machine's CPU must not
// decide what is tested), and once end to end on the device suites where there is no GPU.
#include "test_require.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"
#include "verify/backend.h"

namespace ckpt {
namespace {

using test::absence_verdict;
using test::Need;

TEST(TestRequire, WithoutTheVariableAMissingNeedIsASkipSayingWhy) {
  for (const char* unset : {static_cast<const char*>(nullptr), "", "0"}) {
    const test::Absence a = absence_verdict(Need::gpu, unset, "GPU backend unavailable: no device");
    EXPECT_FALSE(a.fail) << (unset ? unset : "(unset)");
    EXPECT_NE(a.message.find("GPU backend unavailable: no device"), std::string::npos) << a.message;
    EXPECT_NE(a.message.find("CKPT_REQUIRE_GPU=1"), std::string::npos) << a.message;
  }
  EXPECT_FALSE(absence_verdict(Need::avx512, nullptr, "no AVX-512F").fail);
}

TEST(TestRequire, RequireOneTurnsTheSkipIntoAFailureNamingTheVariable) {
  const test::Absence gpu = absence_verdict(Need::gpu, "1", "GPU backend unavailable: no device");
  EXPECT_TRUE(gpu.fail);
  EXPECT_NE(gpu.message.find("GPU backend unavailable: no device"), std::string::npos) << gpu.message;
  EXPECT_NE(gpu.message.find("CKPT_REQUIRE_GPU=1 demands it"), std::string::npos) << gpu.message;
  const test::Absence avx = absence_verdict(Need::avx512, "1", "this CPU has no AVX-512F");
  EXPECT_TRUE(avx.fail);
  EXPECT_NE(avx.message.find("CKPT_REQUIRE_AVX512=1 demands it"), std::string::npos) << avx.message;
  // Each variable demands its own need only.
  EXPECT_STREQ(test::require_variable(Need::gpu), "CKPT_REQUIRE_GPU");
  EXPECT_STREQ(test::require_variable(Need::avx512), "CKPT_REQUIRE_AVX512");
}

TEST(TestRequire, AValueOtherThanZeroOrOneIsAFailureNamingIt) {
  for (const char* typo : {"yes", "true", "2", " 1"}) {
    const test::Absence a = absence_verdict(Need::avx512, typo, "this CPU has no AVX-512F");
    EXPECT_TRUE(a.fail) << typo;
    EXPECT_NE(a.message.find(std::string("'") + typo + "'"), std::string::npos) << a.message;
  }
}

// `this binary --gtest_filter=FILTER` with `env`: exit code and output.
test::RunResult run_self(const std::string& env, const std::string& filter) {
  test::TempDir tmp;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = env + " " + test::shell_quote(self) + " --gtest_filter=" + test::shell_quote(filter) + " >" +
                          test::shell_quote(tmp.str("out")) + " 2>&1";
  const int status = std::system(cmd.c_str());
  test::RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = test::read_text(tmp.str("out"));
  return r;
}

// On a machine without a GPU the device suites skip; CKPT_REQUIRE_GPU=1 (what
// tools/gpu_check.sh sets on the GPU host) makes the same run fail, naming the reason.
TEST(DeviceSuites, RequireGpuTurnsTheirNoGpuSkipsIntoFailures) {
  std::string error;
  if (make_gpu_backend(0, error)) GTEST_SKIP() << "this machine has a GPU: the device suites run on it";
  const std::string filter = "Kernels/Backend.WrongSizesAreRejected/*:OpeningBackend.TheGpuBackendsTraitsAreTheOpenedBackendsAnswers";
  const test::RunResult lax = run_self("CKPT_REQUIRE_GPU=0", filter);
  EXPECT_EQ(lax.exit_code, 0) << lax.out;
  EXPECT_NE(lax.out.find("[  SKIPPED ]"), std::string::npos) << lax.out;
  const test::RunResult demanded = run_self("CKPT_REQUIRE_GPU=1", filter);
  EXPECT_EQ(demanded.exit_code, 1) << demanded.out;
  EXPECT_NE(demanded.out.find("CKPT_REQUIRE_GPU=1 demands it"), std::string::npos) << demanded.out;
  EXPECT_NE(demanded.out.find("2 FAILED TESTS"), std::string::npos) << demanded.out;
}

}  // namespace
}  // namespace ckpt
