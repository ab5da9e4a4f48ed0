// convert, repack-experts and dump -o write their data through io/direct_writer.h: the
// bytes are those of a buffered write, a write failing mid-file leaves no complete-looking
// output (and convert --resume then finishes), the fallback is said once (not with -q),
// and convert's memory budget counts the writer's buffers.
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>

#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "convert/convert.h"
#include "convert/shard_writer.h"
#include "io/atomic_file.h"
#include "io/direct_writer.h"
#include "file_tree.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

ConvertReport convert(const std::string& in, const std::string& out, bool resume = false,
                      ExpertMode experts = ExpertMode::keep) {
  ConvertOptions o;
  o.input = in;
  o.output = out;
  o.resume = resume;
  o.experts = experts;
  return convert_checkpoint(o);
}

bool takes_o_direct(const std::string& dir) {
  AtomicOutput probe(dir + "/probe", kOutputFileMode, OutputUse::bulk);
  std::string error;
  return probe.open(error) && probe.direct();
}

struct ResetOutputIo {
  ~ResetOutputIo() {
    set_output_io(OutputIo::direct);
    set_refuse_direct_for_testing(false);
    set_direct_write_failure_for_testing(0);
  }
};

TEST(ConvertDirect, OutputBytesAreThoseOfABufferedWriteForEveryExpertMode) {
  ResetOutputIo reset;
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  for (ExpertMode mode : {ExpertMode::keep, ExpertMode::int8_shift, ExpertMode::bf16}) {
    const std::string tag = std::to_string(static_cast<int>(mode));
    set_output_io(OutputIo::buffered);
    ASSERT_EQ(convert(in, tmp.str("buffered" + tag), false, mode).status, ConvertStatus::ok);
    set_output_io(OutputIo::direct);
    const uint64_t before = direct_write_requests();
    ASSERT_EQ(convert(in, tmp.str("direct" + tag), false, mode).status, ConvertStatus::ok);
    EXPECT_EQ(test::file_tree(tmp.str("direct" + tag)), test::file_tree(tmp.str("buffered" + tag))) << "experts mode " << tag;
    if (takes_o_direct(tmp.str())) {
      EXPECT_GT(direct_write_requests(), before) << "the shards went through O_DIRECT";
    }
  }
}

// An EIO injected into the write request covering byte 5000 of every file: the first shard
// fails; OUT holds no shard at a final name, no index, no temporary. --resume finishes
// the conversion with the bytes of an uninterrupted one.
TEST(ConvertDirect, AFailedWriteMidFileLeavesNoCompleteLookingOutputAndResumeFinishes) {
  ResetOutputIo reset;
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  ASSERT_EQ(convert(in, tmp.str("clean")).status, ConvertStatus::ok);
  set_direct_write_failure_for_testing(5000);
  const ConvertReport failed = convert(in, tmp.str("out"));
  EXPECT_EQ(failed.status, ConvertStatus::io_error);
  EXPECT_NE(test::describe(failed.findings).find("injected at byte 5000"), std::string::npos)
      << test::describe(failed.findings);
  for (const auto& e : fs::directory_iterator(tmp.str("out"))) {
    const std::string name = e.path().filename().string();
    EXPECT_FALSE(name.ends_with(".safetensors")) << name << " looks complete";
    EXPECT_FALSE(is_temp_name(name)) << name;
    EXPECT_NE(name, "model.safetensors.index.json");
  }
  EXPECT_EQ(live_temporaries(), 0u);
  set_direct_write_failure_for_testing(0);
  const ConvertReport resumed = convert(in, tmp.str("out"), true);
  ASSERT_EQ(resumed.status, ConvertStatus::ok) << test::describe(resumed.findings);
  EXPECT_EQ(test::file_tree(tmp.str("out")), test::file_tree(tmp.str("clean")));
}

// Every file larger than `bytes` is refused by the kernel (RLIMIT_FSIZE: fallocate and
// write fail with EFBIG, SIGXFSZ ignored) while this object lives: a disk that fills up
// under one shard and not under the others, with no special filesystem.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ok_ = ::getrlimit(RLIMIT_FSIZE, &saved_) == 0;
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit lower = saved_;
    lower.rlim_cur = bytes;
    ok_ = ok_ && ::setrlimit(RLIMIT_FSIZE, &lower) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = SIG_DFL;
  bool ok_ = false;
};

// The disk refuses a later shard's blocks (every file larger than the first output shard,
// rounded up to 4 KiB, is refused) after the first shard was written: an I/O error naming
// that shard, no shard of it at its final name, no index, no temporary; --resume, with the
// space back, keeps the finished shard and ends with the bytes of an uninterrupted conversion.
TEST(ConvertDirect, AShardTheDiskRefusesMidConversionLeavesNoCompleteLookingOutputAndResumeFinishes) {
  ResetOutputIo reset;
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  ASSERT_EQ(convert(in, tmp.str("clean")).status, ConvertStatus::ok);
  const auto rounded = [&](int shard) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-00007.safetensors", shard);
    return std::pair<std::string, uint64_t>(name, (fs::file_size(tmp.str("clean") + "/" + name) + 4095) / 4096 * 4096);
  };
  const uint64_t limit_bytes = rounded(1).second;
  int refused = 2;
  while (refused <= 7 && rounded(refused).second <= limit_bytes) ++refused;
  ASSERT_LE(refused, 7) << "no output shard is larger than the first";
  const auto [refused_name, refused_bytes] = rounded(refused);
  ConvertReport failed;
  {
    FileSizeLimit limit(limit_bytes);
    ASSERT_TRUE(limit.ok()) << "setrlimit(RLIMIT_FSIZE)";
    failed = convert(in, tmp.str("out"));
  }
  EXPECT_EQ(failed.status, ConvertStatus::io_error);
  const std::string said = test::describe(failed.findings);
  // Refused by the reserve (fallocate) where the filesystem has it, else by a write.
  EXPECT_TRUE(said.find("cannot reserve " + std::to_string(refused_bytes) + " bytes for " + tmp.str("out") + "/" +
                        refused_name + ": ") != std::string::npos ||
              said.find("cannot write " + tmp.str("out") + "/" + refused_name + ": ") != std::string::npos)
      << said;
  EXPECT_TRUE(fs::exists(tmp.str("out") + "/model-00001-of-00007.safetensors")) << "written before the refusal";
  for (const auto& e : fs::directory_iterator(tmp.str("out"))) {
    const std::string name = e.path().filename().string();
    EXPECT_NE(name, refused_name) << "the refused shard looks complete";
    EXPECT_FALSE(is_temp_name(name)) << name;
    EXPECT_NE(name, "model.safetensors.index.json");
  }
  EXPECT_EQ(live_temporaries(), 0u);
  const ConvertReport resumed = convert(in, tmp.str("out"), true);
  ASSERT_EQ(resumed.status, ConvertStatus::ok) << test::describe(resumed.findings);
  EXPECT_EQ(test::file_tree(tmp.str("out")), test::file_tree(tmp.str("clean")));
}

// A disk without room for the output is refused under the lock before anything is
// written, by convert and by repack-experts alike (one check: io/free_space.h).
TEST(ConvertDirect, ADiskWithoutRoomIsRefusedBeforeAnythingIsWrittenByConvertAndRepack) {
  test::TempDir tmp;
  const std::string v4 = test::fixture("oracle/dsv4-tiny");
  auto r = test::run_ckpt_env("CKPT_TEST_FREE_BYTES=4096", "convert -q " + q(v4) + " " + q(tmp.str("conv")));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("IO_NO_SPACE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the conversion needs "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" bytes but " + tmp.str("conv") + " has 4096 free; nothing was written"), std::string::npos)
      << r.err;
  const std::string gguf = test::fixture("ggml/qwen3next-tiny.gguf");
  r = test::run_ckpt_env("CKPT_TEST_FREE_BYTES=4096", "repack-experts -q " + q(gguf) + " " + q(tmp.str("pack")));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("IO_NO_SPACE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the repack needs "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" bytes but " + tmp.str("pack") + " has 4096 free; nothing was written"), std::string::npos)
      << r.err;
  for (const char* dir : {"conv", "pack"}) {
    for (const auto& e : fs::directory_iterator(tmp.str(dir))) {
      const std::string name = e.path().filename().string();
      EXPECT_TRUE(name == ".ckptkit") << dir << "/" << name << " was written";
    }
  }
  // With the room there, the same commands succeed (the check compared real sizes).
  r = test::run_ckpt("repack-experts -q " + q(gguf) + " " + q(tmp.str("pack2")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(ConvertDirect, OutputBytesAreTheSameThroughTheFallback) {
  ResetOutputIo reset;
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  ASSERT_EQ(convert(in, tmp.str("direct")).status, ConvertStatus::ok);
  set_refuse_direct_for_testing(true);
  const uint64_t buffered_before = buffered_write_requests();
  ASSERT_EQ(convert(in, tmp.str("fallback")).status, ConvertStatus::ok);
  EXPECT_GT(buffered_write_requests(), buffered_before);
  EXPECT_EQ(test::file_tree(tmp.str("fallback")), test::file_tree(tmp.str("direct")));
}

struct ResetShardWorkers {
  ~ResetShardWorkers() { set_shard_pipeline_workers(0); }
};

// A shard's pipeline transforms on at most kDefaultShardWorkers threads (all cores made
// int8-shift write at 0.74x the disk on the GPU host, 6 at 0.91): never more than the
// machine or --threads allows, and exactly what --threads asks for within that.
TEST(ConvertDirect, TheShardPipelineUsesAtMostSixWorkersUnlessThreadsSaysOtherwise) {
  ResetShardWorkers reset;
  const unsigned cores = static_cast<unsigned>(tbb::this_task_arena::max_concurrency());
  set_shard_pipeline_workers(0);
  EXPECT_EQ(shard_pipeline_workers(), std::min(cores, kDefaultShardWorkers));
  set_shard_pipeline_workers(1);
  EXPECT_EQ(shard_pipeline_workers(), 1u);
  set_shard_pipeline_workers(cores + 7);
  EXPECT_EQ(shard_pipeline_workers(), cores) << "no more threads than cores";
  set_shard_pipeline_workers(0);
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    EXPECT_EQ(shard_pipeline_workers(), 1u) << "--threads 1 (global_control) wins";
  }
}

// The cap is what the pipeline does: with one worker, one unit is transformed at a time
// (the count is the pipeline's own), and the bytes are those of the default's.
TEST(ConvertDirect, OneShardWorkerTransformsOneUnitAtATimeAndWritesTheSameBytes) {
  ResetShardWorkers reset;
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  ASSERT_EQ(convert(in, tmp.str("default"), false, ExpertMode::int8_shift).status, ConvertStatus::ok);
  set_shard_pipeline_workers(1);
  reset_shard_pipeline_peak_concurrency();
  ASSERT_EQ(convert(in, tmp.str("one"), false, ExpertMode::int8_shift).status, ConvertStatus::ok);
  EXPECT_EQ(shard_pipeline_peak_concurrency(), 1u);
  EXPECT_EQ(test::file_tree(tmp.str("one")), test::file_tree(tmp.str("default")));
  if (tbb::this_task_arena::max_concurrency() >= 2) {
    set_shard_pipeline_workers(2);
    reset_shard_pipeline_peak_concurrency();
    ASSERT_EQ(convert(in, tmp.str("two"), false, ExpertMode::int8_shift).status, ConvertStatus::ok);
    EXPECT_LE(shard_pipeline_peak_concurrency(), 2u);
    EXPECT_GE(shard_pipeline_peak_concurrency(), 1u);
  }
}

// 128 MiB less the writer's 32 MiB of buffers leaves 8 units of 12 MiB, not 10.
TEST(ConvertDirect, TheMemoryBudgetCountsTheWritersBuffersInFlight) {
  EXPECT_EQ(kDirectWriterBytes, 32u << 20);
  EXPECT_EQ(pipeline_tokens(128u << 20, 12u << 20), 8u);
  EXPECT_EQ(pipeline_tokens(64u << 20, 12u << 20), 2u);   // the floor: two units in flight
  EXPECT_EQ(pipeline_tokens(1u << 30, 12u << 20), 16u);   // the ceiling
  EXPECT_EQ(pipeline_tokens(32u << 20, 12u << 20), 2u);   // nothing left: still two
}

// The CLI: the fallback is one info line on stderr, none with -q; --buffered says nothing.
TEST(ConvertDirect, TheFallbackIsSaidOnceOnStderrAndNotWithQuiet) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  auto r = test::run_ckpt_env("CKPT_TEST_NO_DIRECT=1", "convert " + q(in) + " " + q(tmp.str("a")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t lines = 0;
  for (size_t at = 0; (at = r.err.find("info IO_BUFFERED", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1u) << r.err;
  EXPECT_NE(r.err.find("ckpt convert: info IO_BUFFERED " + tmp.str("a") + ": its filesystem refuses O_DIRECT"),
            std::string::npos)
      << r.err;
  r = test::run_ckpt_env("CKPT_TEST_NO_DIRECT=1", "convert -q " + q(in) + " " + q(tmp.str("b")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  r = test::run_ckpt("convert --buffered " + q(in) + " " + q(tmp.str("c")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("IO_BUFFERED"), std::string::npos) << r.err;
  EXPECT_EQ(test::file_tree(tmp.str("c")), test::file_tree(tmp.str("a")));
}

TEST(ConvertDirect, RepackExpertsWritesTheSameBytesDirectBufferedAndThroughTheFallback) {
  test::TempDir tmp;
  const std::string in = test::fixture("ggml/qwen3next-tiny.gguf");
  auto r = test::run_ckpt("repack-experts -q " + q(in) + " " + q(tmp.str("direct")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("repack-experts -q --buffered " + q(in) + " " + q(tmp.str("buffered")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt_env("CKPT_TEST_NO_DIRECT=1", "repack-experts " + q(in) + " " + q(tmp.str("fallback")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ckpt repack-experts: info IO_BUFFERED"), std::string::npos) << r.err;
  const auto direct = test::file_tree(tmp.str("direct"));
  EXPECT_EQ(direct.size(), 3u);
  EXPECT_EQ(test::file_tree(tmp.str("buffered")), direct);
  EXPECT_EQ(test::file_tree(tmp.str("fallback")), direct);
}

TEST(ConvertDirect, AFailedRepackWriteLeavesNoPackAndNoTemporary) {
  test::TempDir tmp;
  const std::string in = test::fixture("ggml/qwen3next-tiny.gguf");
  auto r = test::run_ckpt_env("CKPT_TEST_WRITE_FAIL_AT=5000", "repack-experts -q " + q(in) + " " + q(tmp.str("out")));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("injected at byte 5000"), std::string::npos) << r.err;
  for (const auto& e : fs::directory_iterator(tmp.str("out"))) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name != "manifest.json" && name != "experts.bin" && name != "dense.gguf" && !is_temp_name(name))
        << name;
  }
}

TEST(ConvertDirect, DumpToAFileIsTheSameBytesAsToStdoutAndAFailureLeavesNoFile) {
  test::TempDir tmp;
  const std::string in = test::fixture("ggml/qwen3next-tiny.gguf");
  const std::string tensor = "blk.0.ffn_gate_exps.weight";
  auto r = test::run_ckpt("dump " + q(in) + " " + tensor + " -o " + q(tmp.str("direct.f32")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("dump --buffered " + q(in) + " " + tensor + " -o " + q(tmp.str("buffered.f32")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("dump " + q(in) + " " + tensor);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<uint8_t> to_stdout(r.out.begin(), r.out.end());
  EXPECT_GT(to_stdout.size(), 4096u);
  EXPECT_EQ(test::read_file(tmp.str("direct.f32")), to_stdout);
  EXPECT_EQ(test::read_file(tmp.str("buffered.f32")), to_stdout);
  r = test::run_ckpt_env("CKPT_TEST_WRITE_FAIL_AT=5000", "dump " + q(in) + " " + tensor + " -o " + q(tmp.str("failed.f32")));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_FALSE(fs::exists(tmp.str("failed.f32")));
}

TEST(ConvertDirect, SynthTinyWritesTheSameBytesDirectAndBuffered) {
  test::TempDir tmp;
  auto r = test::run_ckpt("synth deepseek-v4-flash-0731 --tiny -q " + q(tmp.str("direct")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("synth deepseek-v4-flash-0731 --tiny -q --buffered " + q(tmp.str("buffered")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto direct = test::file_tree(tmp.str("direct"));
  EXPECT_GT(direct.size(), 10u);
  EXPECT_EQ(test::file_tree(tmp.str("buffered")), direct);
  r = test::run_ckpt_env("CKPT_TEST_WRITE_FAIL_AT=5000", "synth deepseek-v4-flash-0731 --tiny -q " + q(tmp.str("failed")));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("injected at byte 5000"), std::string::npos) << r.err;
}

// A refused scale of a tensor that spans several pipeline units (16 MiB of FP8: four units),
// after an 8 MiB copied tensor,
// is an input error naming the scale; the later units, read before the error stops the
// pipeline, were dequantized without a grid (a null dereference: SIGSEGV, found by
// bench/write_direct.sh on random scales).
TEST(ConvertDirect, ARefusedScaleOfATensorOfManyUnitsIsAnErrorNotACrash) {
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  fs::create_directories(in);
  test::write_text(in + "/config.json",
                   R"({"model_type":"bench","torch_dtype":"bfloat16","quantization_config":{"quant_method":"fp8",)"
                   R"("fmt":"e4m3","scale_fmt":"ue8m0","weight_block_size":[128,128]}})");
  // One 8 MiB copied tensor first: its write (the writer's first) is still under way
  // while the weight's units are read.
  std::vector<uint8_t> payload(8u << 20, 0x11);
  payload.resize(payload.size() + 4096u * 4096u, 0x38);  // E4M3 1.0
  std::vector<uint8_t> scale(32 * 32, 0x7F);              // E8M0 2^0
  scale[3] = 250;                                          // 2^123: 448 x it is beyond BF16
  payload.insert(payload.end(), scale.begin(), scale.end());
  const std::string header =
      R"({"layers.0.attn.a.weight":{"dtype":"BF16","shape":[4194304],"data_offsets":[0,8388608]},)"
      R"("layers.0.attn.wq.weight":{"dtype":"F8_E4M3","shape":[4096,4096],"data_offsets":[8388608,25165824]},)"
      R"("layers.0.attn.wq.scale":{"dtype":"F8_E8M0","shape":[32,32],"data_offsets":[25165824,25166848]}})";
  test::write_file(in + "/model.safetensors", test::make_safetensors(header, payload));
  for (int run = 0; run < 4; ++run) {
    auto r = test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("out" + std::to_string(run))));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("scale layers.0.attn.wq.scale"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace ckpt
