// ckpt-gpu verify's GGUF and pack steps compare the device's digest with the CPU's
// (numerics/f32_digest.h) and fall back to the element-by-element comparison when they
// differ. A backend that lies shows the verifier consults the digest, names a real
// difference to its element, and fails closed when only the digest is wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "core/ggml_types.h"
#include "formats/gguf_writer.h"
#include "io/atomic_file.h"
#include "test_util.h"
#include "verify/gpu_verify.h"
#include "verify/opening_backend.h"

namespace ckpt {
namespace {

enum class Fault { none, digest_only, one_element };

// The emulation, with one fault injected into its GGUF results (every other call forwarded).
class FaultyBackend final : public ForwardingBackend {
 public:
  explicit FaultyBackend(Fault f, uint64_t element = 5)
      : ForwardingBackend(make_emulated_backend()), fault_(f), element_(element) {}
  // The faulty element: element `element_` of the first digested step that has it, its low
  // bit flipped in every decode of it (the verifier compares a differing step piece by piece).
  bool ggml_to_f32(int32_t type, std::span<const uint8_t> blocks, std::span<float> out, std::string& error) override {
    if (!inner().ggml_to_f32(type, blocks, out, error)) return false;
    if (fault_ != Fault::one_element || !step_ || blocks.data() < step_ || blocks.data() >= step_ + step_bytes_) return true;
    const GgmlTypeInfo* info = ggml_type_info(type);
    const uint64_t first = static_cast<uint64_t>(blocks.data() - step_) / info->type_size * info->block_size;
    if (element_ >= first && element_ - first < out.size())
      out[element_ - first] = std::bit_cast<float>(std::bit_cast<uint32_t>(out[element_ - first]) ^ 1u);
    return true;
  }
  bool ggml_digest(int32_t type, std::span<const uint8_t> blocks, const DigestWeights& w, F32Digest& out,
                   std::string& error) override {
    ++digest_calls;
    if (!inner().ggml_digest(type, blocks, w, out, error)) return false;
    const GgmlTypeInfo* info = ggml_type_info(type);
    const bool first = fault_ == Fault::one_element && !step_ && blocks.size() / info->type_size * info->block_size > element_;
    if (first) {
      step_ = blocks.data();
      step_bytes_ = blocks.size();
    }
    if (fault_ == Fault::digest_only || first) out.a += 1;
    return true;
  }
  int digest_calls = 0;

 private:
  Fault fault_;
  uint64_t element_;
  const uint8_t* step_ = nullptr;
  uint64_t step_bytes_ = 0;
};

VerifyReport verify_tiny(FaultyBackend& be, bool full_compare = false) {
  VerifyOptions o;
  o.full_compare = full_compare;
  o.memory_budget = 1;  // one job at a time: the faulty call is the first tensor's
  return verify_path(test::fixture("ggml/qwen3next-tiny.gguf"), be, o);
}

TEST(GpuVerifyDigest, AnHonestBackendPassesOnDigestsAlone) {
  FaultyBackend be(Fault::none);
  const VerifyReport r = verify_tiny(be);
  EXPECT_EQ(r.failed(), 0u) << test::describe(r.findings);
  EXPECT_FALSE(r.findings.has_errors()) << test::describe(r.findings);
  EXPECT_GT(be.digest_calls, 0);
}

TEST(GpuVerifyDigest, ADigestThatDisagreesWithEqualValuesFailsClosed) {
  FaultyBackend be(Fault::digest_only);
  const VerifyReport r = verify_tiny(be);
  EXPECT_GT(r.failed(), 0u);
  const std::string d = test::describe(r.findings);
  EXPECT_NE(d.find("VERIFY_BACKEND"), std::string::npos) << d;
  EXPECT_NE(d.find("the digest kernel is wrong"), std::string::npos) << d;
  EXPECT_EQ(d.find("VERIFY_MISMATCH"), std::string::npos) << d;
}

TEST(GpuVerifyDigest, ADifferentElementIsNamedWithBothValues) {
  FaultyBackend be(Fault::one_element);
  const VerifyReport r = verify_tiny(be);
  ASSERT_GT(r.failed(), 0u);
  const std::string d = test::describe(r.findings);
  EXPECT_NE(d.find("VERIFY_MISMATCH"), std::string::npos) << d;
  EXPECT_NE(d.find("element 5 ("), std::string::npos) << d;
  EXPECT_NE(d.find("vs CPU dequant of the same bytes"), std::string::npos) << d;
}

// Beyond the first piece of 65,536 elements: the piece's offset is counted in the element
// and block named.
TEST(GpuVerifyDigest, ADifferentElementInALaterPieceIsNamedToItsIndex) {
  FaultyBackend be(Fault::one_element, 200003);
  const VerifyReport r = verify_tiny(be);
  ASSERT_GT(r.failed(), 0u);
  const std::string d = test::describe(r.findings);
  EXPECT_NE(d.find("element 200003 ("), std::string::npos) << d;
}

TEST(GpuVerifyDigest, FullCompareNeverConsultsTheDigest) {
  FaultyBackend be(Fault::digest_only);
  const VerifyReport r = verify_tiny(be, true);
  EXPECT_EQ(r.failed(), 0u) << test::describe(r.findings);
  EXPECT_EQ(be.digest_calls, 0);
}

// While ckpt-gpu verify's device opens (OpeningBackend), the CPU digests are computed ahead
// and the jobs take them: the report is the one computed without that phase, and a faulty
// device element is still named with both values.
VerifyReport verify_tiny_opening(Fault f, uint64_t element = 5, int open_ms = 300) {
  OpeningBackend be(
      [f, element, open_ms](std::string&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(open_ms));  // the ahead phase runs meanwhile
        return std::unique_ptr<DecodeBackend>(std::make_unique<FaultyBackend>(f, element));
      },
      BackendTraits{make_emulated_backend()->max_chunk_bytes(), 0, true, true});
  VerifyOptions o;
  o.memory_budget = 1;
  return verify_path(test::fixture("ggml/qwen3next-tiny.gguf"), be, o);
}

TEST(GpuVerifyDigest, DigestsComputedAheadWhileTheDeviceOpensGiveTheSameReport) {
  FaultyBackend plain(Fault::none);
  const VerifyReport want = verify_tiny(plain);
  const VerifyReport got = verify_tiny_opening(Fault::none);
  EXPECT_GT(got.stages.ahead, 0.0);
  EXPECT_EQ(got.failed(), 0u) << test::describe(got.findings);
  EXPECT_EQ(test::describe(got.findings), test::describe(want.findings));
  ASSERT_EQ(got.checks.size(), want.checks.size());
  for (size_t i = 0; i < got.checks.size(); ++i) {
    EXPECT_EQ(got.checks[i].tensor, want.checks[i].tensor);
    EXPECT_EQ(got.checks[i].elements, want.checks[i].elements);
  }
  EXPECT_EQ(got.input_bytes_decoded, want.input_bytes_decoded);
  EXPECT_EQ(got.backend, plain.name());
}

// A device that opens before the ahead phase is through (or at once): the jobs compute the
// steps it left. Whatever the split, the same report, and a faulty element still named.
TEST(GpuVerifyDigest, DigestsPartlyComputedAheadGiveTheSameReport) {
  FaultyBackend plain(Fault::none);
  const VerifyReport want = verify_tiny(plain);
  for (int open_ms : {0, 1, 3, 10, 30}) {
    SCOPED_TRACE(testing::Message() << "device open after " << open_ms << " ms");
    const VerifyReport got = verify_tiny_opening(Fault::none, 5, open_ms);
    EXPECT_EQ(got.failed(), 0u) << test::describe(got.findings);
    EXPECT_EQ(test::describe(got.findings), test::describe(want.findings));
    ASSERT_EQ(got.checks.size(), want.checks.size());
    for (size_t i = 0; i < got.checks.size(); ++i) EXPECT_EQ(got.checks[i].elements, want.checks[i].elements);
    EXPECT_EQ(got.input_bytes_decoded, want.input_bytes_decoded);
    const VerifyReport bad = verify_tiny_opening(Fault::one_element, 200003, open_ms);
    ASSERT_GT(bad.failed(), 0u);
    EXPECT_NE(test::describe(bad.findings).find("element 200003 ("), std::string::npos) << test::describe(bad.findings);
  }
}

// `path`: a GGUF of one Q8_0 tensor [4096, rows] (scales 1.0, random codes), written by the
// library's own GgufWriter.
void write_q8_0_gguf(const std::string& path, uint64_t rows) {
  GgufWriter w(32);
  std::string error;
  const uint64_t ne[4] = {4096, rows, 1, 1};
  ASSERT_TRUE(w.add_string_kv("general.architecture", "llama", error)) << error;
  ASSERT_TRUE(w.add_tensor("w", 2, ne, kGgmlQ8_0, error)) << error;
  std::vector<uint8_t> blocks(4096 / 32 * rows * 34);
  std::mt19937 rng(3);
  for (uint64_t b = 0; b < blocks.size(); b += 34) {
    blocks[b] = 0x00;
    blocks[b + 1] = 0x3C;  // f16 1.0
    for (int i = 0; i < 32; ++i) blocks[b + 2 + i] = static_cast<uint8_t>(rng());
  }
  AtomicOutput out(path);
  ASSERT_TRUE(out.open(error) && w.begin(out, error) && w.write_data(out, blocks, error) && w.end_tensor(out, error) &&
              w.finish(error) && out.commit(error))
      << error;
}

// Digest steps hold only their input, so they run up to kDigestMaxElems (16M) elements
// within the backend's chunk: an 8M-element Q8_0 tensor (8.5 MB) is one device call, where
// the 4M-element steps of an element-by-element comparison would make two.
TEST(GpuVerifyDigest, ADigestStepTakesUpTo16MElementsWithinTheChunk) {
  test::TempDir tmp;
  const std::string path = tmp.str("q8.gguf");
  write_q8_0_gguf(path, 2048);
  FaultyBackend be(Fault::none);
  ASSERT_GE(be.max_chunk_bytes(), uint64_t{9} << 20);
  const VerifyReport r = verify_path(path, be, VerifyOptions{});
  EXPECT_EQ(r.failed(), 0u) << test::describe(r.findings);
  ASSERT_EQ(r.checks.size(), 1u);
  EXPECT_EQ(r.checks[0].elements, uint64_t{4096} * 2048);
  EXPECT_EQ(be.digest_calls, 1);
  FaultyBackend wrong(Fault::one_element, 6'000'000);  // in the step's second half
  const VerifyReport w = verify_path(path, wrong, VerifyOptions{});
  ASSERT_GT(w.failed(), 0u);
  EXPECT_NE(test::describe(w.findings).find("element 6000000 ("), std::string::npos) << test::describe(w.findings);
}

TEST(GpuVerifyDigest, AFaultyDeviceElementIsNamedWhenTheCpuDigestsCameAhead) {
  const VerifyReport r = verify_tiny_opening(Fault::one_element, 200003);
  EXPECT_GT(r.stages.ahead, 0.0);
  ASSERT_GT(r.failed(), 0u);
  const std::string d = test::describe(r.findings);
  EXPECT_NE(d.find("element 200003 ("), std::string::npos) << d;
  EXPECT_NE(d.find("vs CPU dequant of the same bytes"), std::string::npos) << d;
}

TEST(GpuVerifyDigest, ADigestLieIsCaughtWhenTheCpuDigestsCameAhead) {
  const VerifyReport r = verify_tiny_opening(Fault::digest_only);
  ASSERT_GT(r.failed(), 0u);
  EXPECT_NE(test::describe(r.findings).find("the digest kernel is wrong"), std::string::npos);
}

// A --experts bf16 conversion is compared by BF16 digests: the same faults, injected into
// the emulation's fp8/mxfp4 BF16 digests and decodes.
class Bf16FaultyBackend final : public ForwardingBackend {
 public:
  explicit Bf16FaultyBackend(Fault f) : ForwardingBackend(make_emulated_backend()), fault_(f) {}
  bool fp8_bf16_digest(std::span<const uint8_t> wr, uint64_t row_begin, const Fp8Grid& g, Fp8ScaleKind kind,
                       std::span<const uint8_t> scale, const DigestWeights& w, F32Digest& out, std::string& error) override {
    ++digest_calls;
    if (!inner().fp8_bf16_digest(wr, row_begin, g, kind, scale, w, out, error)) return false;
    if (fault_ == Fault::digest_only) out.a += 1;
    return true;
  }
  bool mxfp4_bf16_digest(std::span<const uint8_t> wt, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    ++digest_calls;
    if (!inner().mxfp4_bf16_digest(wt, scale, rows, k, w, out, error)) return false;
    if (fault_ != Fault::none && (fault_ == Fault::digest_only || !faulty_)) out.a += 1;
    if (fault_ == Fault::one_element && !faulty_) faulty_ = wt.data();
    return true;
  }
  // The first digested MXFP4 step's element 5: a BF16 mantissa bit flipped in its decode.
  bool mxfp4_to_f32(std::span<const uint8_t> wt, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    if (!inner().mxfp4_to_f32(wt, scale, rows, k, out, error)) return false;
    if (fault_ == Fault::one_element && wt.data() == faulty_) out[5] = std::bit_cast<float>(std::bit_cast<uint32_t>(out[5]) ^ (1u << 22));
    return true;
  }
  int digest_calls = 0;

 private:
  Fault fault_;
  const uint8_t* faulty_ = nullptr;
};

// An --experts int8-shift conversion's experts past --gemm-experts are compared by digests of
// the two decodes (the emulation offers none on its own: here it is made to): the same faults.
class Int8FaultyBackend final : public ForwardingBackend {
 public:
  explicit Int8FaultyBackend(Fault f) : ForwardingBackend(make_emulated_backend()), fault_(f) {}
  bool has_int8_digest() const override { return true; }
  bool int8_shift_digest(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         const DigestWeights& w, F32Digest& out, std::string& error) override {
    ++digest_calls;
    if (!inner().int8_shift_digest(tiles, shift2, p, w, out, error)) return false;
    if (fault_ != Fault::none && (fault_ == Fault::digest_only || !faulty_)) out.b += 1;
    if (fault_ == Fault::one_element && !faulty_) faulty_ = tiles.data();
    return true;
  }
  // The first digested expert's element (1, 5): one more in its decode.
  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    ++decode_calls;
    if (!inner().decode_int8_shift(tiles, shift2, p, q, error)) return false;
    if (fault_ == Fault::one_element && tiles.data() == faulty_) q[p.k + 5] = static_cast<int8_t>(q[p.k + 5] + 1);
    return true;
  }
  int digest_calls = 0, decode_calls = 0;

 private:
  Fault fault_;
  const uint8_t* faulty_ = nullptr;
};

// Both conversions, the same four cases: a typed suite over what differs.
struct Bf16Case {
  using Backend = Bf16FaultyBackend;
  static constexpr const char* experts = "bf16";
  static constexpr const char* equal_results = "BF16 results equal the converted bytes: the digest kernel is wrong";
  static constexpr const char* element = "element 5 (row 0, column 5): device MXFP4 decode";
  static void options(VerifyOptions&) {}
};
struct Int8Case {
  using Backend = Int8FaultyBackend;
  static constexpr const char* experts = "int8-shift";
  static constexpr const char* equal_results = "decode equals the CPU's: the digest kernel is wrong";
  static constexpr const char* element = "expert 1 row 1 column 5: device decode ";
  // Expert 0 of each matrix gets the GEMM check (and the full decode), the others digests.
  static void options(VerifyOptions& o) { o.gemm_experts = 1; }
};

template <class Case>
class GpuVerifyConversionDigest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = tmp_.str(Case::experts);
    const auto r = test::run_ckpt("convert -q " + test::shell_quote(test::fixture("oracle/dsv4-tiny")) + " " +
                                  test::shell_quote(out_) + " --experts " + Case::experts);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  VerifyReport verify(typename Case::Backend& be, bool full_compare = false, bool reference = true) {
    VerifyOptions o;
    if (reference) o.reference = test::fixture("oracle/dsv4-tiny");
    o.full_compare = full_compare;
    o.memory_budget = 1;  // one job at a time
    Case::options(o);
    return verify_path(out_, be, o);
  }
  test::TempDir tmp_;
  std::string out_;
};
using ConversionCases = ::testing::Types<Bf16Case, Int8Case>;
TYPED_TEST_SUITE(GpuVerifyConversionDigest, ConversionCases);

TYPED_TEST(GpuVerifyConversionDigest, AnHonestBackendPassesOnDigests) {
  typename TypeParam::Backend be(Fault::none);
  const VerifyReport r = this->verify(be);
  EXPECT_EQ(r.failed(), 0u) << test::describe(r.findings);
  EXPECT_FALSE(r.findings.has_errors()) << test::describe(r.findings);
  EXPECT_GT(be.digest_calls, 0);
}

TYPED_TEST(GpuVerifyConversionDigest, ADigestThatDisagreesWithEqualValuesFailsClosed) {
  typename TypeParam::Backend be(Fault::digest_only);
  const VerifyReport r = this->verify(be);
  EXPECT_GT(r.failed(), 0u);
  const std::string d = test::describe(r.findings);
  EXPECT_NE(d.find(TypeParam::equal_results), std::string::npos) << d;
  EXPECT_EQ(d.find("VERIFY_MISMATCH"), std::string::npos) << d;
}

TYPED_TEST(GpuVerifyConversionDigest, ADifferentDeviceElementIsNamedWithBothValues) {
  typename TypeParam::Backend be(Fault::one_element);
  const VerifyReport r = this->verify(be);
  ASSERT_GT(r.failed(), 0u);
  const std::string d = test::describe(r.findings);
  EXPECT_NE(d.find("VERIFY_MISMATCH"), std::string::npos) << d;
  EXPECT_NE(d.find(TypeParam::element), std::string::npos) << d;
  EXPECT_EQ(d.find("digest kernel"), std::string::npos) << d;
}

TYPED_TEST(GpuVerifyConversionDigest, FullCompareNeverConsultsTheDigest) {
  typename TypeParam::Backend be(Fault::digest_only);
  const VerifyReport r = this->verify(be, true);
  EXPECT_EQ(r.failed(), 0u) << test::describe(r.findings);
  EXPECT_EQ(be.digest_calls, 0);
}

// A checkpoint alone (no --reference): its MXFP4 experts against the CPU's BF16 of the same
// bytes, by the same digests and with the same faults.
TEST(GpuVerifyMxfp4Alone, DigestsPassNameADeviceElementAndFailClosed) {
  auto verify_alone = [](Bf16FaultyBackend& be) {
    VerifyOptions o;
    o.memory_budget = 1;  // one job at a time
    return verify_path(test::fixture("oracle/dsv4-tiny"), be, o);
  };
  Bf16FaultyBackend honest(Fault::none);
  const VerifyReport ok = verify_alone(honest);
  EXPECT_EQ(ok.failed(), 0u) << test::describe(ok.findings);
  EXPECT_GT(honest.digest_calls, 0);
  Bf16FaultyBackend liar(Fault::digest_only);
  const std::string lie = test::describe(verify_alone(liar).findings);
  EXPECT_NE(lie.find("BF16 results equal the CPU's: the digest kernel is wrong"), std::string::npos) << lie;
  EXPECT_EQ(lie.find("VERIFY_MISMATCH"), std::string::npos) << lie;
  Bf16FaultyBackend wrong(Fault::one_element);
  const std::string bad = test::describe(verify_alone(wrong).findings);
  EXPECT_NE(bad.find("element 5 (row 0, column 5): device MXFP4 decode"), std::string::npos) << bad;
  EXPECT_NE(bad.find("vs CPU reference"), std::string::npos) << bad;
}

// INT8-shift only: an int8-shift checkpoint verified on its own (no --reference) takes the
// same digests, and the GEMM experts still decode in full.
using GpuVerifyInt8Digest = GpuVerifyConversionDigest<Int8Case>;
TEST_F(GpuVerifyInt8Digest, WithAndWithoutTheReferenceTheGemmExpertsDecodeInFull) {
  for (bool reference : {true, false}) {
    Int8FaultyBackend be(Fault::none);
    const VerifyReport r = verify(be, false, reference);
    EXPECT_EQ(r.failed(), 0u) << test::describe(r.findings);
    EXPECT_FALSE(r.findings.has_errors()) << test::describe(r.findings);
    EXPECT_GT(be.digest_calls, 0) << reference;
    EXPECT_GT(be.decode_calls, 0) << reference;
  }
}

}  // namespace
}  // namespace ckpt
