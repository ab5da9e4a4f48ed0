// OpeningBackend (verify/opening_backend.h): ckpt-gpu verify's backend opens its device on
// a thread of its own. It answers its traits at once, says `opening` until the open ends,
// makes early calls wait for it, and turns a failed open into `failed` with the reason,
// every call failing with it and no verification job run.
#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <vector>

#include "core/ggml_types.h"
#include "test_require.h"
#include "test_util.h"
#include "verify/gpu_verify.h"
#include "verify/opening_backend.h"

namespace ckpt {
namespace {

constexpr BackendTraits kTraits{12345, 678, true, true, true, true};

// One Q8_0 block (scale 1.0, codes 0..31) and the f32 it decodes to.
std::vector<uint8_t> q8_block() {
  std::vector<uint8_t> b = {0x00, 0x3C};  // f16 1.0
  for (int i = 0; i < 32; ++i) b.push_back(static_cast<uint8_t>(i));
  return b;
}

TEST(OpeningBackend, AnswersItsTraitsAtOnceAndIsOpeningUntilItsDeviceIs) {
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  OpeningBackend be(
      [opened](std::string&) {
        opened.wait();
        return make_emulated_backend();
      },
      kTraits);
  EXPECT_EQ(be.state(), BackendState::opening);
  EXPECT_EQ(be.max_chunk_bytes(), 12345u);
  EXPECT_EQ(be.host_memory(), 678u);
  EXPECT_TRUE(be.concurrent());
  EXPECT_TRUE(be.has_ggml_digest());
  EXPECT_TRUE(be.has_bf16_digest());
  EXPECT_TRUE(be.has_int8_digest());
  // A call made while opening waits for the open, then runs on the opened backend.
  auto call = std::async(std::launch::async, [&be] {
    const std::vector<uint8_t> block = q8_block();
    std::vector<float> out(32);
    std::string error;
    const bool ok = be.ggml_to_f32(kGgmlQ8_0, block, out, error);
    return ok && out[0] == 0.0f && out[31] == 31.0f;
  });
  EXPECT_EQ(call.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  gate.set_value();
  EXPECT_TRUE(call.get());
  EXPECT_EQ(be.state(), BackendState::ready);
  EXPECT_EQ(be.name(), make_emulated_backend()->name());
}

TEST(OpeningBackend, AFailedOpenIsReportedByStateAndByEveryCall) {
  OpeningBackend be(
      [](std::string& error) {
        error = "no driver here";
        return std::unique_ptr<DecodeBackend>();
      },
      kTraits);
  std::string why;
  while (be.state(&why) == BackendState::opening) std::this_thread::yield();
  EXPECT_EQ(be.state(&why), BackendState::failed);
  EXPECT_EQ(why, "no driver here");
  EXPECT_EQ(be.name(), "none");
  const std::vector<uint8_t> block = q8_block();
  std::vector<float> out(32);
  std::string error;
  EXPECT_FALSE(be.ggml_to_f32(kGgmlQ8_0, block, out, error));
  EXPECT_EQ(error, "no usable GPU: no driver here");
}

// ckpt-gpu verify reports NO_DEVICE for a failed open: the verifier must not have run a job
// (nor spent the time of one) on a backend that cannot take calls.
TEST(OpeningBackend, NoJobRunsOnABackendThatFailedToOpen) {
  OpeningBackend be(
      [](std::string& error) {
        error = "no driver here";
        return std::unique_ptr<DecodeBackend>();
      },
      kTraits);
  while (be.state() == BackendState::opening) std::this_thread::yield();
  const VerifyReport r = verify_path(test::fixture("ggml/qwen3next-tiny.gguf"), be, VerifyOptions{});
  EXPECT_TRUE(r.checks.empty());
  EXPECT_EQ(r.backend, "none");
}

// The GPU backend's traits (what the verifier plans with before the device opens) are what
// the opened backend answers.
TEST(OpeningBackend, TheGpuBackendsTraitsAreTheOpenedBackendsAnswers) {
  std::string error;
  auto opened = make_gpu_backend(0, error);
  if (!opened) return test::skip_or_fail_without(test::Need::gpu, "GPU backend unavailable: " + error);
  auto opening = start_gpu_backend(0);
  EXPECT_EQ(opening->max_chunk_bytes(), opened->max_chunk_bytes());
  EXPECT_EQ(opening->host_memory(), opened->host_memory());
  EXPECT_EQ(opening->concurrent(), opened->concurrent());
  EXPECT_EQ(opening->has_ggml_digest(), opened->has_ggml_digest());
  EXPECT_EQ(opening->has_bf16_digest(), opened->has_bf16_digest());
  EXPECT_EQ(opening->has_int8_digest(), opened->has_int8_digest());
  EXPECT_EQ(opening->name(), opened->name());
  EXPECT_EQ(opening->state(), BackendState::ready);
}

}  // namespace
}  // namespace ckpt
