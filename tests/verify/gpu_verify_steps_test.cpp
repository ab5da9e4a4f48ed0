// ckpt-gpu verify's streaming steps named to the byte: a backend whose chunk is a few rows
// cuts an FP8 tensor into steps with a shorter last one, and a finding in that last step
// names the element's own byte offset. Run on the emulation and, where a GPU is present,
// on the GPU backend (the same steps: the chunk is the wrapper's).
#include <gtest/gtest.h>

#include "test_util.h"
#include "verify/backend.h"
#include "verify/gpu_verify.h"

namespace ckpt {
namespace {

// A backend that takes at most `chunk` bytes per call (the verifier's steps follow it).
class SmallChunks final : public ForwardingBackend {
 public:
  SmallChunks(std::unique_ptr<DecodeBackend> inner, uint64_t chunk) : ForwardingBackend(std::move(inner)), chunk_(chunk) {}
  uint64_t max_chunk_bytes() const override { return chunk_; }

 private:
  uint64_t chunk_;
};

class GpuVerifySteps : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<DecodeBackend> backend() {
    if (GetParam() == "emulate") return make_emulated_backend();
    std::string error;
    auto gpu = make_gpu_backend(0, error);
    if (!gpu) ADD_FAILURE() << "GPU backend unavailable: " << error;
    return gpu;
  }
  void SetUp() override {
    if (GetParam() == "gpu") {
      std::string error;
      if (!make_gpu_backend(0, error)) GTEST_SKIP() << "GPU backend unavailable: " << error;
    }
  }
  test::TempDir tmp_;
};

// Steps of 5 rows over an FP8 weight of R rows (R % 5 != 0): an E4M3 NaN code in the last
// row, inside the shorter last step, is VERIFY_INPUT at the weight's offset + its element
// (one byte each), not at `element % step` from the step's start.
TEST_P(GpuVerifySteps, AnFp8InputFindingInAShorterLastStepNamesItsByteOffset) {
  const std::string in = tmp_.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  std::string name, file;
  uint64_t offset = 0, element = 0, cols = 0;
  {
    auto model = test::load_model_checked(in);
    ASSERT_TRUE(model);
    for (const auto& t : model->view.tensors) {
      if (t.type != "F8_E4M3" || t.shape.size() != 2) continue;
      const uint64_t rows = t.shape[0], last = rows % 5;
      if (rows <= 5 || last == 0 || (rows - last) % last == 0) continue;  // old arithmetic would be right
      name = t.name;
      cols = t.shape[1];
      element = (rows - 1) * cols + 3;  // the last row, column 3
      offset = t.offset + element;
      file = model->view.file_paths[t.file];
      break;
    }
  }
  ASSERT_FALSE(name.empty());
  auto bytes = test::read_file(file);
  bytes[offset] = 0x7F;  // E4M3 NaN
  test::write_file(file, bytes);
  SmallChunks be(backend(), 5 * cols);  // FP8 steps of 5 rows
  VerifyOptions o;
  o.memory_budget = 1;
  const VerifyReport r = verify_path(in, be, o);
  bool named = false;
  for (const Finding& f : r.findings.items())
    if (f.code == "VERIFY_INPUT" && f.tensor == name) {
      named = true;
      EXPECT_EQ(f.offset, std::optional<uint64_t>(offset)) << f.message;
      EXPECT_NE(f.message.find("weight_nan"), std::string::npos) << f.message;
    }
  EXPECT_TRUE(named) << test::describe(r.findings);
  EXPECT_GT(r.failed(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuVerifySteps, ::testing::Values("emulate", "gpu"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ckpt
