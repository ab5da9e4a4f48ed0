// `ckpt-gpu verify` end to end: the conversions of the fixtures pass, one flipped byte
// fails naming the tensor and element, and a malformed pack is an error, not a crash.
// Each case runs with the host emulation of the kernels and, where a GPU is present, with
// the GPU backend.
#include <algorithm>
#include <cstring>

#include <gtest/gtest.h>

#include <filesystem>

#include "test_require.h"
#include "test_util.h"
#include "core/ggml_types.h"
#include "numerics/int8_shift.h"
#include "verify/backend.h"
#include "verify/gpu_verify.h"

namespace ckpt {
namespace {

using test::fixture;
using test::run_ckpt;
using test::run_tool;
using test::shell_quote;
using test::TempDir;

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;
  uint64_t offset = 0;  // in the data section
};

// A GGUF v3 file of F32 tensors (general.architecture = llama, alignment 32) whose data
// section is `data`.
std::vector<uint8_t> make_f32_gguf(const std::vector<GgufTensorSpec>& tensors, const std::vector<float>& data) {
  std::vector<uint8_t> out;
  auto put = [&](const void* p, size_t n) { out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); };
  auto u32 = [&](uint32_t v) { put(&v, 4); };
  auto u64 = [&](uint64_t v) { put(&v, 8); };
  auto str = [&](const std::string& s) { u64(s.size()); put(s.data(), s.size()); };
  put("GGUF", 4);
  u32(3);
  u64(tensors.size());
  u64(1);
  str("general.architecture");
  u32(8);  // string
  str("llama");
  for (const auto& t : tensors) {
    str(t.name);
    u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) u64(d);
    u32(0);  // F32
    u64(t.offset);
  }
  out.resize((out.size() + 31) / 32 * 32, 0);
  put(data.data(), data.size() * 4);
  return out;
}

class GpuVerify : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "gpu") {
      std::string error;
      if (!make_gpu_backend(0, error)) return test::skip_or_fail_without(test::Need::gpu, "GPU backend unavailable: " + error);
    }
  }
  test::RunResult verify(const std::string& path, const std::string& reference, const std::string& extra = "") {
    std::string args = "verify " + shell_quote(path) + " --backend " + GetParam() + " " + extra;
    if (!reference.empty()) args += " --reference " + shell_quote(reference);
    return run_tool("ckpt-gpu", "", args);
  }
  std::string convert(const std::string& experts) {
    const std::string out = tmp_.str(experts);
    auto r = run_ckpt("convert -q " + shell_quote(fixture("oracle/dsv4-tiny")) + " " + shell_quote(out) +
                      " --experts " + experts);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return out;
  }
  // Flips bit 6 of the byte at `offset` bytes into tensor `name`'s payload (or sets the byte
  // to `value`); returns the shard file.
  std::string flip(const std::string& dir, const std::string& name, uint64_t offset, int value = -1) {
    auto model = test::load_model_checked(dir);
    const ModelTensor* t = model->view.find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return "";
    const std::string file = model->view.file_paths[t->file];
    auto bytes = test::read_file(file);
    bytes[t->offset + offset] = value < 0 ? bytes[t->offset + offset] ^ 0x40 : static_cast<uint8_t>(value);
    test::write_file(file, bytes);
    return file;
  }
  TempDir tmp_;
};

TEST_P(GpuVerify, KeepConversionOfDsv4TinyPasses) {
  const std::string out = convert("keep");
  auto r = verify(out, fixture("oracle/dsv4-tiny"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("fp8_dequant              42 ok      0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VERDICT: PASS"), std::string::npos) << r.out;
}

TEST_P(GpuVerify, Int8ShiftConversionOfDsv4TinyPasses) {
  const std::string out = convert("int8-shift");
  auto r = verify(out, fixture("oracle/dsv4-tiny"), "--gemm-experts 0 --json " + shell_quote(tmp_.str("v.json")));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* check : {"int8_shift_bytes", "int8_shift_decode", "int8_gemm", "activation_quant", "mxfp4_dequant"})
    EXPECT_NE(r.out.find(check), std::string::npos) << check << "\n" << r.out;
  EXPECT_NE(r.out.find("max relative L2 error"), std::string::npos) << r.out;
  const std::string json = test::read_text(tmp_.str("v.json"));
  EXPECT_NE(json.find("\"verdict\":\"pass\""), std::string::npos);
  // The process's peak RSS is in the summary (measured, like seconds): a positive byte count.
  const size_t at = json.find("\"peak_rss_bytes\":");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_GT(std::stoull(json.substr(at + 17)), 1u << 20) << json.substr(at, 40);
}

TEST_P(GpuVerify, Bf16ConversionOfDsv4TinyPassesAndAFlippedExpertByteFails) {
  const std::string out = convert("bf16");
  auto r = verify(out, fixture("oracle/dsv4-tiny"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("mxfp4_dequant           120 ok      0 failed"), std::string::npos) << r.out;
  flip(out, "layers.2.ffn.experts.5.w3.weight", 2 * 1000 + 1);  // high byte of element 1000
  r = verify(out, fixture("oracle/dsv4-tiny"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor layers.2.ffn.experts.5.w3.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("element 1000 (row "), std::string::npos) << r.out;
}

TEST_P(GpuVerify, FlippedByteInAConvertedFp8TensorFailsNamingTensorAndElement) {
  const std::string out = convert("keep");
  const std::string file = flip(out, "layers.0.attn.wq_a.weight", 2 * 777 + 1);  // high byte of element 777
  auto r = verify(out, fixture("oracle/dsv4-tiny"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("VERIFY_MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor layers.0.attn.wq_a.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("element 777 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VERDICT: FAIL"), std::string::npos) << r.out;
}

TEST_P(GpuVerify, FlippedByteInAnInt8ShiftExpertFailsNamingExpertAndElement) {
  const std::string out = convert("int8-shift");
  RemapParams p;
  auto model = test::load_model_checked(out);
  const ModelTensor* cs = model->view.find("layers.1.ffn.experts.w2.channel_scale");
  ASSERT_NE(cs, nullptr);
  const ModelTensor* mx = model->view.find("layers.1.ffn.experts.w2.mxfp4");
  ASSERT_NE(mx, nullptr);
  p.rows = cs->shape[1];
  p.k = mx->shape[1] * 32;
  flip(out, "layers.1.ffn.experts.w2.mxfp4", 2 * remap_mxfp4_bytes(p) + 5);  // expert 2, tile byte 5
  auto r = verify(out, fixture("oracle/dsv4-tiny"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor layers.1.ffn.experts.w2.mxfp4"), std::string::npos) << r.out;
  // Tile byte 5: lane 1 (row 0, tid 1), lane byte 1 -> source byte 3: elements 6 and 7.
  EXPECT_NE(r.out.find("expert 2 element [0, 7]"), std::string::npos) << r.out;
}

// The pipeline's results do not depend on how many jobs run at once: one job at a time
// (a budget below any job) and the default give the same report, mismatches included.
TEST_P(GpuVerify, OneJobAtATimeGivesTheSameReportAsManyInFlight) {
  const std::string out = convert("int8-shift");
  auto model = test::load_model_checked(out);
  const ModelTensor* cs = model->view.find("layers.1.ffn.experts.w2.channel_scale");
  const ModelTensor* mx = model->view.find("layers.1.ffn.experts.w2.mxfp4");
  ASSERT_TRUE(cs && mx);
  RemapParams p;
  p.rows = cs->shape[1];
  p.k = mx->shape[1] * 32;
  flip(out, "layers.1.ffn.experts.w2.mxfp4", 2 * remap_mxfp4_bytes(p) + 5);
  flip(out, "layers.0.attn.wq_a.weight", 2 * 777 + 1);
  auto without_verdict = [](std::string text) { return text.substr(0, text.rfind("VERDICT")); };
  auto one = verify(out, fixture("oracle/dsv4-tiny"), "--stats --memory-budget 1K");
  auto many = verify(out, fixture("oracle/dsv4-tiny"), "--stats");
  EXPECT_EQ(one.exit_code, 1) << one.out;
  EXPECT_EQ(many.exit_code, 1) << many.out;
  EXPECT_NE(one.err.find(" 1 in flight"), std::string::npos) << one.err;
  EXPECT_EQ(many.err.find(" 1 in flight"), std::string::npos) << many.err;
  EXPECT_NE(one.out.find("expert 2 element [0, 7]"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("element 777"), std::string::npos) << one.out;
  EXPECT_EQ(without_verdict(one.out), without_verdict(many.out));
  EXPECT_EQ(verify(out, fixture("oracle/dsv4-tiny"), "--memory-budget lots").exit_code, 2);
}

// --stats: a line of seconds per stage on stderr, and with --json the same stages in
// summary.stages; without --stats the report has no stages (two runs' reports differ in
// seconds and peak_rss_bytes only).
TEST_P(GpuVerify, StatsGiveEveryStageOnStderrAndInTheJsonOnlyWithStats) {
  const std::string out = convert("int8-shift");
  auto r = verify(out, fixture("oracle/dsv4-tiny"), "-q --stats --json " + shell_quote(tmp_.str("s.json")));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const size_t line = r.err.find("ckpt-gpu stages (seconds summed over jobs): ");
  ASSERT_NE(line, std::string::npos) << r.err;
  const std::string json = test::read_text(tmp_.str("s.json"));
  ASSERT_NE(json.find("\"stages\":{"), std::string::npos) << json.substr(0, 600);
  // Every stage an INT8-shift conversion goes through took some time (steady_clock, ns).
  for (const char* stage : {"jobs", "read", "buffers", "cpu_reference", "compare", "gemm_cpu", "device", "device_fp8",
                            "device_mxfp4", "device_int8_decode", "gemm_device"}) {
    const std::string field = std::string(stage == std::string("jobs") ? ": " : ", ") + stage + " ";
    EXPECT_NE(r.err.find(field, line), std::string::npos) << stage << "\n" << r.err;
    const size_t at = json.find(std::string("\"") + stage + "_s\":");
    ASSERT_NE(at, std::string::npos) << stage << "\n" << json.substr(0, 600);
    EXPECT_GT(std::stod(json.substr(at + std::strlen(stage) + 5)), 0.0) << stage;
  }
  EXPECT_NE(json.find("\"device_ggml_s\":0"), std::string::npos);  // no GGUF here
  r = verify(out, fixture("oracle/dsv4-tiny"), "-q --json " + shell_quote(tmp_.str("plain.json")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_text(tmp_.str("plain.json")).find("\"stages\""), std::string::npos);
  EXPECT_EQ(r.err.find("ckpt-gpu stages"), std::string::npos) << r.err;
}

// The experts' buffers are reused from job to job (one set for every expert when one job
// runs at a time, w13 and w2 experts of different sizes alternating): experts after a
// flipped one still pass, and each flipped one is named to the element.
TEST_P(GpuVerify, ReusedExpertBuffersStillNameEachFlippedExpertAndPassTheOthers) {
  const std::string out = convert("int8-shift");
  auto model = test::load_model_checked(out);
  auto params = [&](const std::string& stem) {
    RemapParams p;
    p.rows = model->view.find(stem + ".channel_scale")->shape[1];
    p.k = model->view.find(stem + ".mxfp4")->shape[1] * 32;
    return p;
  };
  const RemapParams w2 = params("layers.1.ffn.experts.w2"), w13 = params("layers.2.ffn.experts.w13");
  flip(out, "layers.1.ffn.experts.w2.mxfp4", 2 * remap_mxfp4_bytes(w2) + 5);    // expert 2, tile byte 5
  flip(out, "layers.2.ffn.experts.w13.mxfp4", 5 * remap_mxfp4_bytes(w13) + 5);  // expert 5, tile byte 5
  for (const char* budget : {"1K", "1G"}) {
    auto r = verify(out, fixture("oracle/dsv4-tiny"), std::string("--gemm-experts 0 --memory-budget ") + budget);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("int8_shift_bytes         78 ok      2 failed"), std::string::npos) << budget << r.out;
    EXPECT_NE(r.out.find("int8_shift_decode        78 ok      0 failed"), std::string::npos) << budget << r.out;
    EXPECT_NE(r.out.find("int8_gemm                78 ok      0 failed"), std::string::npos) << budget << r.out;
    // Tile byte 5: lane 1 (row 0, tid 1), lane byte 1 -> source byte 3: elements 6 and 7.
    EXPECT_NE(r.out.find("tensor layers.1.ffn.experts.w2.mxfp4"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tensor layers.2.ffn.experts.w13.mxfp4"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("expert 2 element [0, 7]"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("expert 5 element [0, 7]"), std::string::npos) << r.out;
  }
}

// A dense tensor of a pack changed after the repack: with --reference the device's decode is
// compared with the CPU's decode of the reference's bytes, so it is a mismatch naming the
// tensor; alone, the pack's bytes only agree with themselves (all a pack alone can show).
TEST_P(GpuVerify, AChangedDenseTensorOfAPackFailsAgainstTheReference) {
  const std::string pack = tmp_.str("pack");
  ASSERT_EQ(run_ckpt("repack-experts -q " + shell_quote(fixture("ggml/qwen3next-tiny.gguf")) + " " + shell_quote(pack))
                .exit_code,
            0);
  uint64_t at = 0;
  std::string name;
  {
    const auto dense = test::load_model_checked(pack + "/dense.gguf");
    ASSERT_TRUE(dense);
    for (const auto& t : dense->view.tensors)
      if (t.nbytes >= 4096 && t.name.find("A_log") == std::string::npos) {
        at = t.offset + t.nbytes / 2;
        name = t.name;
        break;
      }
  }
  ASSERT_FALSE(name.empty());
  auto bytes = test::read_file(pack + "/dense.gguf");
  bytes[at] ^= 0x04;
  test::write_file(pack + "/dense.gguf", bytes);
  auto r = verify(pack, fixture("ggml/qwen3next-tiny.gguf"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("VERIFY_MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor " + name + " @"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vs CPU dequant of the source"), std::string::npos) << r.out;
  EXPECT_EQ(verify(pack, "").exit_code, 0);
}

// Swaps ne0 and ne1 of tensor `name` in a GGUF's header (its tensor info: name, n_dims,
// dims); returns false when the tensor is not 2-D or the swap would cut its blocks.
bool swap_gguf_dims(std::vector<uint8_t>& file, const std::string& name) {
  std::vector<uint8_t> key(8 + name.size());
  const uint64_t len = name.size();
  std::memcpy(key.data(), &len, 8);
  std::memcpy(key.data() + 8, name.data(), name.size());
  const auto at = std::search(file.begin(), file.end(), key.begin(), key.end());
  if (at == file.end()) return false;
  const size_t dims = static_cast<size_t>(at - file.begin()) + key.size();
  uint32_t n_dims = 0;
  uint64_t ne[2];
  std::memcpy(&n_dims, file.data() + dims, 4);
  if (n_dims != 2) return false;
  std::memcpy(ne, file.data() + dims + 4, 16);
  int32_t type = 0;
  std::memcpy(&type, file.data() + dims + 20, 4);
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (ne[0] == ne[1] || !info || ne[1] % info->block_size) return false;
  std::swap(ne[0], ne[1]);
  std::memcpy(file.data() + dims + 4, ne, 16);
  return true;
}

// A dense tensor of a pack whose dims were swapped and one value changed has no tensor of
// the same name, type and shape in the reference: a VERIFY_UNMATCHED finding naming it,
// never a decode of its own bytes against themselves (which passed).
TEST_P(GpuVerify, APackDenseTensorWithoutASameShapeTensorInTheReferenceIsAFinding) {
  const std::string pack = tmp_.str("pack"), source = fixture("ggml/qwen3next-tiny.gguf");
  ASSERT_EQ(run_ckpt("repack-experts -q " + shell_quote(source) + " " + shell_quote(pack)).exit_code, 0);
  auto bytes = test::read_file(pack + "/dense.gguf");
  std::string name;
  uint64_t at = 0;
  {
    const auto dense = test::load_model_checked(pack + "/dense.gguf");
    ASSERT_TRUE(dense);
    for (const auto& t : dense->view.tensors)
      if (t.name.find("A_log") == std::string::npos && t.nbytes >= 64 && swap_gguf_dims(bytes, t.name)) {
        name = t.name;
        at = t.offset + t.nbytes / 2;
        break;
      }
  }
  ASSERT_FALSE(name.empty());
  bytes[at] ^= 0x04;
  test::write_file(pack + "/dense.gguf", bytes);
  auto r = verify(pack, source);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("VERIFY_UNMATCHED " + pack + "/dense.gguf tensor " + name + ": "), std::string::npos)
      << name << "\n" << r.out;
  EXPECT_EQ(r.out.find("VERDICT: PASS"), std::string::npos) << r.out;
}

TEST_P(GpuVerify, RepackOfQwen3nextTinyPassesAndAFlippedBlobByteFails) {
  const std::string pack = tmp_.str("pack");
  auto rp = run_ckpt("repack-experts -q " + shell_quote(fixture("ggml/qwen3next-tiny.gguf")) + " " + shell_quote(pack));
  ASSERT_EQ(rp.exit_code, 0) << rp.err;
  auto r = verify(pack, fixture("ggml/qwen3next-tiny.gguf"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ggml_dequant"), std::string::npos) << r.out;
  // Without the source, each part is checked against the CPU dequant of its own bytes.
  EXPECT_EQ(verify(pack, "").exit_code, 0);

  auto bytes = test::read_file(pack + "/experts.bin");
  bytes[4196] ^= 0x01;  // blob 0 (layer 0, expert 0), inside its IQ3_S gate part
  test::write_file(pack + "/experts.bin", bytes);
  r = verify(pack, fixture("ggml/qwen3next-tiny.gguf"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("PACK_PART_HASH"), std::string::npos) << r.out;  // the manifest's xxh3 disagrees
  // ...and the device decode names the element: byte 4196 is in IQ3_S block 38 (110-byte
  // blocks of 256 elements from 0), whose first changed element is 9784.
  EXPECT_NE(r.out.find("VERIFY_MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor blk.0.ffn_gate_exps.weight @4180: blob layer 0 expert 0 element 9784 (IQ3_S block"),
            std::string::npos)
      << r.out;
}

// The pack's validation runs beside the decode jobs; when it finds the pack unusable (here
// a reference that is not the pack's source: its SHA-256 differs), the report holds the
// validation's findings alone, as when the validation ran first and no job ran.
TEST_P(GpuVerify, APackWithTheWrongReferenceReportsTheValidationOnly) {
  const std::string pack = tmp_.str("pack");
  ASSERT_EQ(run_ckpt("repack-experts -q " + shell_quote(fixture("ggml/qwen3next-tiny.gguf")) + " " + shell_quote(pack))
                .exit_code,
            0);
  auto src = test::read_file(fixture("ggml/qwen3next-tiny.gguf"));
  src[src.size() / 2] ^= 0x10;
  const std::string other = tmp_.str("other.gguf");
  test::write_file(other, src);
  auto r = verify(pack, other);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("PACK_SOURCE_SHA256"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ggml_dequant"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("VERIFY_"), std::string::npos) << r.out;
}

TEST_P(GpuVerify, GgufFileDequantizesEqually) {
  auto r = verify(fixture("ggml/qwen3next-tiny.gguf"), "");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ggml_dequant             51 ok"), std::string::npos) << r.out;
}

TEST_P(GpuVerify, MalformedPackIsAnErrorNotACrash) {
  const std::string pack = tmp_.str("pack");
  ASSERT_EQ(run_ckpt("repack-experts -q " + shell_quote(fixture("ggml/qwen3next-tiny.gguf")) + " " + shell_quote(pack))
                .exit_code,
            0);
  std::string manifest = test::read_text(pack + "/manifest.json");
  test::write_text(pack + "/manifest.json", manifest.substr(0, manifest.size() / 2));
  auto r = verify(pack, "");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("PACK_MANIFEST_PARSE"), std::string::npos) << r.out;
}

TEST_P(GpuVerify, NothingVerifiableIsAnErrorNotAPass) {
  // A BF16 conversion holds no FP8 pair and no INT8-shift expert: alone, nothing is checked.
  const std::string out = convert("bf16");
  auto r = verify(out, "", "--json " + shell_quote(tmp_.str("v.json")));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("ERROR VERIFY_NOTHING"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--reference"), std::string::npos) << r.out;  // says how to check it
  EXPECT_EQ(r.out.find("VERDICT: PASS"), std::string::npos) << r.out;
  EXPECT_NE(test::read_text(tmp_.str("v.json")).find("\"verdict\":\"fail\""), std::string::npos);
  // With its input the same output is verifiable, and passes.
  EXPECT_EQ(verify(out, fixture("oracle/dsv4-tiny")).exit_code, 0);
  // A GGUF without tensors: nothing to decode either.
  test::write_file(tmp_.str("none.gguf"), make_f32_gguf({}, {}));
  auto none = verify(tmp_.str("none.gguf"), "");
  EXPECT_EQ(none.exit_code, 1) << none.out << none.err;
  EXPECT_NE(none.out.find("VERIFY_NOTHING"), std::string::npos) << none.out;
}

// A zero-element tensor compares no byte: it is accepted (as every other command accepts
// it) but is no check; the ordinary tensor beside it is the one check.
TEST_P(GpuVerify, AZeroElementGgufTensorIsAcceptedButNotCountedAsACheck) {
  // ne [0, 4] (no element per row) and [4, 0] (no row) beside an ordinary tensor.
  const std::string path = tmp_.str("zero.gguf");
  test::write_file(path, make_f32_gguf({{"w", {8}, 0}, {"empty.rows", {0, 4}, 32}, {"empty.cols", {4, 0}, 32}},
                                       {0, 1, 2, 3, 4, 5, 6, 7}));
  ASSERT_EQ(run_ckpt("validate " + shell_quote(path)).exit_code, 0);  // as every other command accepts it
  auto r = verify(path, "");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ggml_dequant              1 ok      0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VERDICT: PASS - 1 checks"), std::string::npos) << r.out;
}

// A GGUF whose every tensor has zero elements compared nothing: VERIFY_NOTHING (exit 1),
// not "PASS - 2 checks".
TEST_P(GpuVerify, AGgufOfOnlyZeroElementTensorsVerifiesNothingAndFails) {
  const std::string path = tmp_.str("zero.gguf");
  const auto bytes = make_f32_gguf({{"empty.rows", {0, 4}, 0}, {"empty.cols", {4, 0}, 0}}, {});
  test::dump_fuzz_seed("gguf_header", "verify-all-zero-element-tensors", bytes);
  test::write_file(path, bytes);
  ASSERT_EQ(run_ckpt("validate " + shell_quote(path)).exit_code, 0);
  auto r = verify(path, "", "--json " + shell_quote(tmp_.str("v.json")));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("ERROR VERIFY_NOTHING"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VERDICT: FAIL - 0 checks"), std::string::npos) << r.out;
  const std::string json = test::read_text(tmp_.str("v.json"));
  EXPECT_NE(json.find("\"checks\":0,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"verdict\":\"fail\""), std::string::npos) << json;
}

// --reference B.gguf for a GGUF A: B is read and every tensor of A is compared with B's of
// the same name, type and shape (a different value fails, naming the tensor); a tensor of
// one without its counterpart in the other is a finding; a copy of A passes against it.
TEST_P(GpuVerify, AGgufIsComparedTensorByTensorWithItsGgufReference) {
  const std::string a = tmp_.str("a.gguf"), same = tmp_.str("same.gguf"), other = tmp_.str("other.gguf"),
                    fewer = tmp_.str("fewer.gguf"), more = tmp_.str("more.gguf");
  const std::vector<float> values{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  test::write_file(a, make_f32_gguf({{"w", {8}, 0}, {"v", {4}, 32}}, values));
  test::write_file(same, make_f32_gguf({{"w", {8}, 0}, {"v", {4}, 32}}, values));
  std::vector<float> changed = values;
  changed[10] = 10.5f;  // v element 2
  test::write_file(other, make_f32_gguf({{"w", {8}, 0}, {"v", {4}, 32}}, changed));
  test::write_file(fewer, make_f32_gguf({{"w", {8}, 0}}, values));
  std::vector<float> longer = values;
  longer.resize(20, 1.0f);  // x at byte 64
  test::write_file(more, make_f32_gguf({{"w", {8}, 0}, {"v", {4}, 32}, {"x", {4}, 64}}, longer));

  auto r = verify(a, same, "--json " + shell_quote(tmp_.str("v.json")));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("ggml_dequant              2 ok      0 failed"), std::string::npos) << r.out;
  const std::string json = test::read_text(tmp_.str("v.json"));
  EXPECT_NE(json.find("\"verified_against\":\"CPU decode of reference " + same + " tensor v"), std::string::npos) << json;

  r = verify(a, other);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("VERIFY_MISMATCH " + a + " tensor v @"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("element 2 (F32 block at byte 8): device 10 [0x41200000] vs CPU dequant of the source 10.5"),
            std::string::npos)
      << r.out;

  r = verify(a, fewer);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("VERIFY_UNMATCHED " + a + " tensor v: "), std::string::npos) << r.out;
  r = verify(a, more);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("VERIFY_UNMATCHED " + a + " tensor x: the reference"), std::string::npos) << r.out;
}

// A reference that is not a GGUF file (a directory, a safetensors checkpoint) cannot be
// compared with a GGUF: refused with VERIFY_REFERENCE, never "against DIR: PASS".
TEST_P(GpuVerify, ADirectoryOrSafetensorsReferenceOfAGgufIsRefused) {
  const std::string a = tmp_.str("a.gguf");
  test::write_file(a, make_f32_gguf({{"w", {8}, 0}}, {0, 1, 2, 3, 4, 5, 6, 7}));
  for (const std::string& reference : {tmp_.str(""), fixture("oracle/dsv4-tiny")}) {
    auto r = verify(a, reference);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("ERROR VERIFY_REFERENCE"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("VERDICT: PASS"), std::string::npos) << r.out;
  }
}

// Every check of the JSON report says what it was compared with.
TEST_P(GpuVerify, EveryCheckOfTheJsonReportSaysWhatItWasVerifiedAgainst) {
  const std::string out = convert("int8-shift");
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string in = fixture("oracle/dsv4-tiny");
  struct Run {
    std::string path, reference, against;
  };
  for (const Run& run : {Run{out, in, "\"verified_against\":\"CPU remap of reference " + in},
                         Run{out, in, "\"verified_against\":\"bytes of reference " + in},
                         Run{in, "", "\"verified_against\":\"CPU decode of " + in},
                         Run{fixture("ggml/qwen3next-tiny.gguf"), "", "\"verified_against\":\"CPU decode of the same bytes ("}}) {
    const std::string json_path = tmp_.str("v.json");
    auto r = verify(run.path, run.reference, "--json " + shell_quote(json_path));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    const std::string json = test::read_text(json_path);
    EXPECT_GT(count(json, "\"check\":\""), 0u) << json.substr(0, 400);
    EXPECT_EQ(count(json, "\"check\":\""), count(json, "\"verified_against\":\"")) << json.substr(0, 400);
    EXPECT_EQ(count(json, "\"verified_against\":\"\""), 0u);
    EXPECT_NE(json.find(run.against), std::string::npos) << run.against << "\n" << json.substr(0, 800);
  }
}

TEST_P(GpuVerify, AnFp8WeightWithoutItsScaleIsAnErrorNotSkipped) {
  // One FP8 weight (no .scale anywhere) beside an INT8-shift-free BF16 tensor.
  std::vector<uint8_t> payload(128 * 128 + 4, 0x38);
  test::write_file(tmp_.str("m.safetensors"),
                   test::make_safetensors(R"({"a.weight":{"dtype":"F8_E4M3","shape":[128,128],"data_offsets":[0,16384]},)"
                                          R"("b.weight":{"dtype":"BF16","shape":[2],"data_offsets":[16384,16388]}})",
                                          payload));
  auto r = verify(tmp_.str("m.safetensors"), "");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("1 FP8 tensor is not verified"), std::string::npos) << r.out;
}

// gpt-oss --experts bf16: X [E, K, R] is X_blocks [E, R, K/32, 16] x X_scales dequantized and
// transposed; every expert is one device check (2 layers x 2 matrices x 4 experts).
TEST_P(GpuVerify, GptOssBf16ConversionPassesWithEveryExpertChecked) {
  const std::string in = fixture("families/gptoss-mxfp4/in"), out = tmp_.str("gptoss");
  auto c = run_ckpt("convert -q " + shell_quote(in) + " " + shell_quote(out) + " --experts bf16");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  auto r = verify(out, in, "--json " + shell_quote(tmp_.str("v.json")));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("mxfp4_dequant            16 ok      0 failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VERDICT: PASS"), std::string::npos) << r.out;
  const std::string json = test::read_text(tmp_.str("v.json"));
  for (const char* t : {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.1.mlp.experts.down_proj"})
    for (int e = 0; e < 4; ++e) {
      const std::string check = std::string("\"check\":\"mxfp4_dequant\",\"tensor\":\"") + t +
                                "\",\"part\":\"expert " + std::to_string(e) + "\"";
      EXPECT_NE(json.find(check), std::string::npos) << check << "\n" << json;
    }
}

// One flipped byte of OUT's BF16 experts: named to the expert, its [K, R] element, the tensor
// element and the input row and column, with both values.
TEST_P(GpuVerify, GptOssFlippedOutputByteIsNamedToTheExpertAndElement) {
  const std::string in = fixture("families/gptoss-mxfp4/in"), out = tmp_.str("gptoss");
  ASSERT_EQ(run_ckpt("convert -q " + shell_quote(in) + " " + shell_quote(out) + " --experts bf16").exit_code, 0);
  const std::string name = "model.layers.1.mlp.experts.down_proj";
  auto model = test::load_model_checked(out);
  const ModelTensor* t = model->view.find(name);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape.size(), 3u);
  const uint64_t k = t->shape[1], rows = t->shape[2], e = 2, kk = 5, rr = 7;  // element [5, 7] of expert 2
  const uint64_t element = e * k * rows + kk * rows + rr;
  const auto bytes = test::tensor_bytes(*model, *t);
  const uint16_t before = static_cast<uint16_t>(bytes[2 * element + 1] << 8 | bytes[2 * element]);
  model.reset();
  flip(out, name, 2 * element + 1);  // the high byte
  char want[160];
  std::snprintf(want, sizeof want, "vs converted 0x%04x", static_cast<unsigned>(before ^ 0x4000));
  auto r = verify(out, in);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("VERIFY_MISMATCH"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor " + name), std::string::npos) << r.out;
  const std::string where = "expert 2 element [5, 7] of its [" + std::to_string(k) + ", " + std::to_string(rows) +
                            "] matrix (tensor element " + std::to_string(element) + "; input " + name +
                            "_blocks row 7, column 5)";
  EXPECT_NE(r.out.find(where), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  EXPECT_NE(r.out.find("mxfp4_dequant            15 ok      1 failed"), std::string::npos) << r.out;
}

// A flipped byte of the reference's blocks: the device and the CPU decode it alike, and the
// result no longer equals OUT: a mismatch in that expert.
TEST_P(GpuVerify, GptOssFlippedInputBlockByteIsAMismatch) {
  const std::string in = tmp_.str("in"), out = tmp_.str("gptoss");
  test::copy_tree(fixture("families/gptoss-mxfp4/in"), in);
  ASSERT_EQ(run_ckpt("convert -q " + shell_quote(in) + " " + shell_quote(out) + " --experts bf16").exit_code, 0);
  const std::string blocks = "model.layers.0.mlp.experts.gate_up_proj_blocks";
  auto model = test::load_model_checked(in);
  const ModelTensor* t = model->view.find(blocks);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape.size(), 4u);
  const uint64_t rows = t->shape[1], k = t->shape[2] * 32, e = 3, row = 10, byte = 4;  // elements 8, 9 of row 10
  flip(in, blocks, e * rows * k / 2 + row * k / 2 + byte);  // 0x40: the high nibble, element 9
  auto r = verify(out, in);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor model.layers.0.mlp.experts.gate_up_proj"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("expert 3 element [9, 10] of its [" + std::to_string(k) + ", " + std::to_string(rows) + "]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(= CPU reference) vs converted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mxfp4_dequant            15 ok      1 failed"), std::string::npos) << r.out;
}

// A checkpoint alone: its MXFP4 expert weights (gpt-oss _blocks, DeepSeek routed experts)
// are decoded on the device and compared with the CPU's exact BF16 of the same bytes, as its
// FP8 weights are.
TEST_P(GpuVerify, AnMxfp4CheckpointAloneVerifiesEveryExpertWeight) {
  auto gptoss = verify(fixture("families/gptoss-mxfp4/in"), "");
  EXPECT_EQ(gptoss.exit_code, 0) << gptoss.out << gptoss.err;
  EXPECT_NE(gptoss.out.find("mxfp4_dequant             4 ok      0 failed"), std::string::npos) << gptoss.out;
  auto dsv4 = verify(fixture("oracle/dsv4-tiny"), "");
  EXPECT_EQ(dsv4.exit_code, 0) << dsv4.out << dsv4.err;
  EXPECT_NE(dsv4.out.find("fp8_dequant              42 ok      0 failed"), std::string::npos) << dsv4.out;
  EXPECT_NE(dsv4.out.find("mxfp4_dequant           120 ok      0 failed"), std::string::npos) << dsv4.out;
}

// A scale byte of 0xFF (E8M0 NaN) in a gpt-oss checkpoint alone: no exact BF16 exists, so the
// CPU reference refuses it, named to the tensor, element and byte offset, never a pass.
TEST_P(GpuVerify, AnMxfp4ScaleOfNanInACheckpointAloneIsAnInputError) {
  const std::string in = tmp_.str("in");
  test::copy_tree(fixture("families/gptoss-mxfp4/in"), in);
  const std::string scales = "model.layers.1.mlp.experts.down_proj_scales";
  auto model = test::load_model_checked(in);
  const ModelTensor* t = model->view.find(scales);
  ASSERT_NE(t, nullptr);
  const uint64_t k = t->shape.back() * 32, at = 37;  // scale 37: elements 32 * 37 .. of the E·R rows of K
  model.reset();
  flip(in, scales, at, 0xFF);
  auto r = verify(in, "");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  // The one scale rule (numerics/scale_rule.h) refuses the scale before any block is
  // decoded, naming the scale's row and block, as convert and validate --deep do.
  EXPECT_NE(r.out.find("VERIFY_INPUT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scale " + scales + " at row " + std::to_string(at / (k / 32)) + ", block " +
                       std::to_string(at % (k / 32))),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("VERDICT: PASS"), std::string::npos) << r.out;
}

// verify applies the scale rule convert and validate --deep apply: a negative F32 multiplier
// (which decodes without a fault, so the CPU and the device agree on flipped signs) is an
// input error naming the scale, never a PASS.
TEST_P(GpuVerify, AScaleConvertWouldRefuseIsAnInputErrorNotAPass) {
  const std::string in = tmp_.str("in");
  test::copy_tree(fixture("families/dsv3-fp8/in"), in);
  const std::string scale = "model.layers.0.mlp.down_proj.weight_scale_inv";  // F32 [2, 3]
  flip(in, scale, 4 * 4 + 3, 0xBF);  // element 4's sign and exponent: -(something)
  auto r = verify(in, "");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("VERIFY_INPUT"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("scale " + scale + " at row 1, block 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not a positive multiplier"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("VERDICT: PASS"), std::string::npos) << r.out;
}

// MXFP4 blocks whose scales have the wrong shape, alone: the plan's own finding and an
// error that the weights are not verified, never "nothing to verify".
TEST_P(GpuVerify, AnMxfp4CheckpointAloneWithAWrongScaleShapeSaysWhatIsNotVerified) {
  const std::string dir = tmp_.str("bad");
  std::filesystem::create_directories(dir);
  test::write_text(dir + "/config.json", test::read_text(fixture("families/gptoss-mxfp4/in/config.json")));
  const std::string header =
      "{\"model.layers.0.mlp.experts.gate_up_proj_blocks\":{\"dtype\":\"U8\",\"shape\":[2,8,2,16],\"data_offsets\":[0,512]},"
      "\"model.layers.0.mlp.experts.gate_up_proj_scales\":{\"dtype\":\"U8\",\"shape\":[2,17],\"data_offsets\":[512,546]}}";
  test::write_file(dir + "/model.safetensors", test::make_safetensors(header, std::vector<uint8_t>(546, 0x77)));
  auto r = verify(dir, "");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("MXFP4_SCALE_SHAPE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("its quantized weights are not verified"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("VERIFY_NOTHING"), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuVerify, ::testing::Values("emulate", "gpu"),
                         [](const auto& info) { return info.param; });

// The emulation, with one device result wrong: the INT8-shift decode's element [1, 5]
// off by one bit, or the MXFP4 decode's element 3 of each call never written.
class OneElementWrong final : public ForwardingBackend {
 public:
  explicit OneElementWrong(bool decode) : ForwardingBackend(make_emulated_backend()), decode_(decode) {}
  std::string name() const override { return "one element wrong"; }
  bool concurrent() const override { return true; }
  bool mxfp4_to_f32(std::span<const uint8_t> w, std::span<const uint8_t> scale, uint64_t rows, uint64_t k,
                    std::span<float> out, std::string& error) override {
    if (decode_) return inner().mxfp4_to_f32(w, scale, rows, k, out, error);
    std::vector<float> all(out.size());
    if (!inner().mxfp4_to_f32(w, scale, rows, k, all, error)) return false;
    for (size_t i = 0; i < out.size(); ++i)
      if (i != 3) out[i] = all[i];
    return true;
  }
  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    if (!inner().decode_int8_shift(tiles, shift2, p, q, error)) return false;
    if (decode_) q[1 * p.k + 5] = static_cast<int8_t>(q[1 * p.k + 5] ^ 1);
    return true;
  }

 private:
  bool decode_;
};

// The experts' buffers are reused from job to job, so a wrong device element is found in
// every expert, named with both values, and an element the device never writes (the
// original weights' buffer holds NaN, which no MXFP4 value is) is a mismatch, not a stale
// value from an earlier expert.
TEST(GpuVerifyExperts, AWrongOrUnwrittenDeviceElementIsNamedInEveryExpert) {
  TempDir tmp;
  const std::string out = tmp.str("int8");
  auto c = run_ckpt("convert -q --experts int8-shift " + shell_quote(fixture("oracle/dsv4-tiny")) + " " + shell_quote(out));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  for (const bool decode : {true, false}) {
    for (const uint64_t budget : {uint64_t{1024}, uint64_t{1} << 30}) {  // one job at a time, and many
      OneElementWrong be(decode);
      VerifyOptions o;
      o.reference = fixture("oracle/dsv4-tiny");
      o.gemm_experts = 0;
      o.memory_budget = budget;
      const VerifyReport r = verify_path(out, be, o);
      uint64_t named = 0, failed = 0;
      for (const Finding& f : r.findings.items())
        named += f.code == "VERIFY_MISMATCH" &&
                 f.message.find(decode ? " row 1 column 5: device decode " : " original weight [0, 3]: device nan vs CPU ") !=
                     std::string::npos;
      for (const VerifyCheck& ch : r.checks) failed += !ch.ok;
      EXPECT_EQ(named, 80u) << decode << " " << budget;  // 5 matrices pairs x 2 x 8 experts
      EXPECT_EQ(failed, 80u) << decode << " " << budget;
      if (decode) {
        const std::string& m = r.findings.items().front().message;
        const size_t d = m.find("device decode "), cpu = m.find(" vs CPU ");
        ASSERT_TRUE(d != std::string::npos && cpu != std::string::npos) << m;
        EXPECT_EQ(std::stoi(m.substr(d + 14)), std::stoi(m.substr(cpu + 8)) ^ 1) << m;
      }
    }
  }
}

// An expert without the GEMM check has its two decodes compared in column pieces (here of
// 128 columns: a w13 expert of 256 is two pieces, a w2 expert of 128 one). The emulation
// with one wrong element per call: (5, 7) of a piece that starts a slab, (2, 7) of one whose
// spans go on from the previous call's. A wrong element is named by its place in the
// expert, and of two, the first in row order: row 2, column 128 + 7 in a w13 expert.
class WrongInEveryPiece final : public ForwardingBackend {
 public:
  WrongInEveryPiece() : ForwardingBackend(make_emulated_backend()) {}
  std::string name() const override { return "wrong in every piece"; }
  bool decode_int8_shift(std::span<const uint8_t> tiles, std::span<const uint8_t> shift2, const RemapParams& p,
                         std::span<int8_t> q, std::string& error) override {
    if (!inner().decode_int8_shift(tiles, shift2, p, q, error)) return false;
    // A piece that goes on from the previous call: both of its spans start where that
    // call's ended, with the same shape.
    const bool goes_on = tiles.data() == last_.tiles_end && shift2.data() == last_.shift2_end && p.k == last_.k;
    const uint64_t row = goes_on ? 2 : 5;
    last_ = {tiles.data() + tiles.size(), shift2.data() + shift2.size(), p.k};
    q[row * p.k + 7] = static_cast<int8_t>(q[row * p.k + 7] ^ 1);
    return true;
  }

 private:
  struct Call {
    const uint8_t *tiles_end, *shift2_end;
    uint64_t k;
  } last_{nullptr, nullptr, 0};
};

TEST(GpuVerifyExperts, DecodePiecesNameTheExpertsFirstWrongElement) {
  TempDir tmp;
  const std::string out = tmp.str("int8");
  auto c = run_ckpt("convert -q --experts int8-shift " + shell_quote(fixture("oracle/dsv4-tiny")) + " " + shell_quote(out));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  WrongInEveryPiece be;
  VerifyOptions o;
  o.reference = fixture("oracle/dsv4-tiny");
  o.gemm_experts = 1;      // expert 0 of each matrix: one whole decode (the GEMM needs it)
  o.memory_budget = 1;     // one job at a time: the calls in order
  o.decode_piece_bytes = 1;  // the least piece: 4 32-blocks
  const VerifyReport r = verify_path(out, be, o);
  uint64_t w13 = 0, w2 = 0, whole = 0;
  for (const Finding& f : r.findings.items()) {
    if (f.code != "VERIFY_MISMATCH") continue;
    const bool first_expert = f.message.rfind("expert 0 ", 0) == 0;
    const bool is_w13 = f.tensor.find("w13") != std::string::npos;
    if (first_expert) {
      whole += f.message.find("expert 0 row 5 column 7: device decode ") != std::string::npos;
    } else if (is_w13) {
      w13 += f.message.find(" row 2 column 135: device decode ") != std::string::npos;
    } else {
      w2 += f.message.find(" row 5 column 7: device decode ") != std::string::npos;
    }
  }
  // 5 layers x 8 experts per matrix; expert 0 of each of the 10 matrices decoded whole.
  EXPECT_EQ(whole, 10u);
  EXPECT_EQ(w13, 35u);
  EXPECT_EQ(w2, 35u);
  EXPECT_EQ(r.failed(), 80u);
}

TEST(GpuVerifyCli, NoDeviceIsExitCode4WithAReason) {
  std::string error;
  if (make_gpu_backend(0, error)) GTEST_SKIP() << "a GPU is present";
  auto r = run_tool("ckpt-gpu", "", "verify " + shell_quote(fixture("ggml/qwen3next-tiny.gguf")));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("no usable GPU"), std::string::npos) << r.err;
}

TEST(GpuVerifyCli, UsageErrorsAreExitCode2) {
  EXPECT_EQ(run_tool("ckpt-gpu", "", "verify").exit_code, 2);
  EXPECT_EQ(run_tool("ckpt-gpu", "", "frobnicate x").exit_code, 2);
}

}  // namespace
}  // namespace ckpt
