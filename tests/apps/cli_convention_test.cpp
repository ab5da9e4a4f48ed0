// Issue 15 "One CLI convention" and issue 14 "Output that can be trusted": every
// subcommand has -q, --progress and (where it has a report) --json FILE|-; usage mistakes
// exit 2; stdout write errors exit 3; untrusted strings are escaped; JSON on failure.
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>

#include "formats/json.h"
#include "test_util.h"
#include "verify/backend.h"

namespace ckpt {
namespace {

const auto q = test::shell_quote;
namespace fs = std::filesystem;

bool parses(const std::string& text, JsonDoc& doc) {
  std::string error;
  return doc.parse(text, error);
}

// `tool args >/dev/full`: the exit code and stderr.
test::RunResult run_to_dev_full(const std::string& tool, const std::string& args) {
  test::TempDir tmp;
  const std::string cmd = test::tool_binary(tool) + " " + args + " >/dev/full 2>" + tmp.str("err") + " </dev/null";
  const int status = std::system(cmd.c_str());
  test::RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = test::read_text(tmp.str("err"));
  return r;
}

TEST(CliConvention, EverySubcommandHasQuietAndProgress) {
  for (const char* sub : {"inspect", "validate", "convert", "synth", "dump", "repack-experts", "hash", "diff", "sign",
                          "verify-signature", "relayout"}) {
    auto r = test::run_ckpt(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("--quiet"), std::string::npos) << sub << "\n" << r.out;
    EXPECT_NE(r.out.find("--progress"), std::string::npos) << sub << "\n" << r.out;
  }
  for (const char* sub : {"inspect", "validate", "convert", "repack-experts", "diff", "relayout"}) {
    auto r = test::run_ckpt(std::string(sub) + " --help");
    EXPECT_NE(r.out.find("--json"), std::string::npos) << sub << "\n" << r.out;
  }
  for (const char* sub : {"verify", "bench"}) {
    auto r = test::run_tool("ckpt-gpu", "", std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("--quiet"), std::string::npos) << sub << "\n" << r.out;
    EXPECT_NE(r.out.find("--progress"), std::string::npos) << sub << "\n" << r.out;
  }
}

TEST(CliConvention, HelpSynopsisListsEveryOption) {
  auto v = test::run_ckpt("validate --help");
  const std::string usage = v.out.substr(v.out.find("Usage:"), v.out.find('\n', v.out.find("Usage:")) - v.out.find("Usage:"));
  for (const char* opt : {"--reference", "--merge", "--partition", "--partitions", "--hub-sha256", "--deep", "--json",
                          "--quiet", "--progress", "--threads", "--max-findings", "--mode", "--profile"})
    EXPECT_NE(usage.find(opt), std::string::npos) << opt << " missing from: " << usage;
  auto c = test::run_ckpt("convert --help");
  EXPECT_NE(c.out.find("at least 64M"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("K, M, G, T"), std::string::npos) << c.out;
  auto top = test::run_ckpt("--help");
  EXPECT_NE(top.out.find("global"), std::string::npos) << top.out;  // --threads is global
}

TEST(CliConvention, EveryUsageMistakeExits2) {
  const std::string tiny = q(test::fixture("oracle/dsv4-tiny"));
  for (const char* sub : {"inspect", "validate", "convert", "synth", "dump", "repack-experts", "hash", "diff", "relayout"})
    EXPECT_EQ(test::run_ckpt(std::string(sub) + " --no-such-flag").exit_code, 2) << sub;
  auto dump = test::run_ckpt("dump " + tiny);
  EXPECT_EQ(dump.exit_code, 2) << "dump without a tensor name\n" << dump.err;
  test::TempDir tmp;
  auto gguf = test::run_ckpt("convert " + q(test::fixture("ggml/qwen3next-tiny.gguf")) + " " + q(tmp.str("out")));
  EXPECT_EQ(gguf.exit_code, 2) << gguf.out << gguf.err;
  EXPECT_NE(gguf.err.find("GGUF"), std::string::npos) << gguf.err;
  EXPECT_FALSE(fs::exists(tmp.str("out")));
  EXPECT_EQ(test::run_tool("ckpt-gpu", "", "verify --no-such-flag x").exit_code, 2);
  EXPECT_EQ(test::run_tool("ckpt-gpu", "", "bench --k 33").exit_code, 2);
}

TEST(CliConvention, GpuVersionWorks) {
  auto r = test::run_tool("ckpt-gpu", "", "--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ckptkit"), std::string::npos) << r.out;
}

TEST(CliConvention, ProgressIsForcedOnANonTerminalAndQuietWins) {
  const std::string tiny = q(test::fixture("oracle/dsv4-tiny"));
  auto off = test::run_ckpt("validate --deep " + tiny);
  EXPECT_EQ(off.err.find("progress:"), std::string::npos) << off.err;  // not a terminal: off
  auto on = test::run_ckpt("validate --deep --progress " + tiny);
  EXPECT_EQ(on.exit_code, 0);
  EXPECT_NE(on.err.find("progress: validate"), std::string::npos) << on.err;
  auto quiet = test::run_ckpt("validate --deep --progress -q " + tiny);
  EXPECT_EQ(quiet.err, "");
  test::TempDir tmp;
  auto conv = test::run_ckpt("convert --progress " + tiny + " " + q(tmp.str("out")));
  EXPECT_EQ(conv.exit_code, 0) << conv.err;
  EXPECT_NE(conv.err.find("progress: convert"), std::string::npos) << conv.err;
  auto hash = test::run_ckpt("hash --progress " + tiny);
  EXPECT_NE(hash.err.find("progress: hash"), std::string::npos) << hash.err;
}

TEST(CliConvention, StdoutWriteErrorsExit3) {
  const std::string tiny = q(test::fixture("oracle/dsv4-tiny"));
  for (const std::string& args : {"validate " + tiny, "inspect " + tiny, "inspect --json - " + tiny,
                                  "validate --json - " + tiny, "diff " + tiny + " " + tiny, "hash " + tiny,
                                  "relayout --dry-run --tp 2 " + q(test::fixture("families/dsv3-fp8/in")) + " /nonexistent/out"}) {
    auto r = run_to_dev_full("ckpt", args);
    EXPECT_EQ(r.exit_code, 3) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("standard output"), std::string::npos) << args << "\n" << r.err;
  }
  auto v = run_to_dev_full("ckpt-gpu", "verify --backend emulate " + q(test::fixture("ggml/qwen3next-tiny.gguf")));
  EXPECT_EQ(v.exit_code, 3) << v.err;
  // A report file on a full device too.
  auto j = test::run_ckpt("validate --json /dev/full " + tiny);
  EXPECT_EQ(j.exit_code, 3) << j.err;
}

TEST(CliConvention, InspectJsonGoesToAFileAndIsPrintedOnFailure) {
  test::TempDir tmp;
  const std::string tiny = q(test::fixture("oracle/dsv4-tiny"));
  auto f = test::run_ckpt("inspect -q --json " + q(tmp.str("i.json")) + " " + tiny);
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "");
  JsonDoc doc;
  ASSERT_TRUE(parses(test::read_text(tmp.str("i.json")), doc));
  EXPECT_EQ(json_int(doc.root(), "tensors"), 416);
  auto missing = test::run_ckpt("inspect --json - /nonexistent/ckpt");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  JsonDoc fail;
  ASSERT_TRUE(parses(missing.out, fail)) << missing.out;
  EXPECT_GE(json_int(fail.root(), "errors"), 1);
}

// Whether a GPU is usable is asked of the backend, not read from the exit code under test:
// any exit code but 4 on a machine without a GPU is a failure (it was a skip).
TEST(CliConvention, VerifyWithoutAGpuPrintsJsonAndExits4) {
  std::string error;
  if (make_gpu_backend(0, error)) GTEST_SKIP() << "this machine has a usable GPU: verify runs on it, not exit 4";
  auto r = test::run_tool("ckpt-gpu", "", "verify --json - " + q(test::fixture("ggml/qwen3next-tiny.gguf")));
  ASSERT_EQ(r.exit_code, 4) << "no GPU here (" << error << "), so verify must say so with exit 4\n" << r.err;
  JsonDoc doc;
  ASSERT_TRUE(parses(r.out, doc)) << r.out << r.err;
  EXPECT_EQ(json_string(doc.root(), "verdict"), "fail");
  EXPECT_NE(r.out.find("NO_DEVICE"), std::string::npos) << r.out;
  auto missing = test::run_tool("ckpt-gpu", "", "verify --backend emulate --json - /nonexistent");
  EXPECT_NE(missing.exit_code, 0);
  JsonDoc m;
  EXPECT_TRUE(parses(missing.out, m)) << missing.out;
}

// An unknown CKPT_DEQUANT_ISA is a usage error of both tools (exit 2), naming the value and
// the accepted ones, before any work; an accepted one runs.
TEST(CliConvention, AnUnknownDequantIsaIsAUsageErrorNamingIt) {
  const std::string gguf = q(test::fixture("ggml/qwen3next-tiny.gguf"));
  for (const std::string tool : {"ckpt", "ckpt-gpu"}) {
    const std::string args = tool == "ckpt" ? "inspect " + gguf : "verify --backend emulate " + gguf;
    auto bad = test::run_tool(tool, "CKPT_DEQUANT_ISA=avx3", args);
    EXPECT_EQ(bad.exit_code, 2) << tool << "\n" << bad.err;
    EXPECT_NE(bad.err.find("CKPT_DEQUANT_ISA='avx3'"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("accepted: auto, scalar, avx2, avx512"), std::string::npos) << bad.err;
    EXPECT_EQ(bad.out, "") << tool;
    auto good = test::run_tool(tool, "CKPT_DEQUANT_ISA=scalar", args);
    EXPECT_EQ(good.exit_code, 0) << tool << "\n" << good.err;
  }
}

TEST(CliConvention, RepackJsonStatusIsAString) {
  test::TempDir tmp;
  const std::string src = q(test::fixture("ggml/qwen3next-tiny.gguf"));
  auto ok = test::run_ckpt("repack-experts --json - " + src + " " + q(tmp.str("pack")));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  JsonDoc doc;
  ASSERT_TRUE(parses(ok.out, doc));
  EXPECT_EQ(json_string(doc.root(), "status"), "ok");
  auto again = test::run_ckpt("repack-experts --json - " + src + " " + q(tmp.str("pack")));
  EXPECT_EQ(again.exit_code, 2) << again.err;
  JsonDoc refused;
  ASSERT_TRUE(parses(again.out, refused));
  EXPECT_EQ(json_string(refused.root(), "status"), "usage_error");
}

TEST(CliConvention, ConvertPrintsItsPlanBeforeWriting) {
  test::TempDir tmp;
  auto r = test::run_ckpt("convert " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(tmp.str("out")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t plan = r.out.find("plan for "), disk = r.out.find("disk needed"), done = r.out.find("\nconverted ");
  ASSERT_NE(plan, std::string::npos) << r.out;
  ASSERT_NE(done, std::string::npos) << r.out;
  EXPECT_LT(plan, disk);
  EXPECT_LT(disk, done);
  EXPECT_EQ(test::run_ckpt("convert -q --overwrite " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(tmp.str("out"))).out, "");
}

TEST(CliConvention, ADryRunThatSaysNotEnoughExits1) {
  // /proc has no free blocks: the plan cannot fit, and the dry run says no.
  auto r = test::run_ckpt("convert --dry-run " + q(test::fixture("oracle/dsv4-tiny")) + " /proc/ckpt-no-space");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("NOT ENOUGH"), std::string::npos) << r.out;
  auto ok = test::run_ckpt("convert --dry-run " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(test::TempDir().str("o")));
  EXPECT_EQ(ok.exit_code, 0) << ok.out;
}

TEST(CliConvention, ErrorLinesHaveTheOneFormat) {
  auto dump = test::run_ckpt("dump " + q(test::fixture("oracle/dsv4-tiny")) + " no.such.tensor -o /dev/null");
  EXPECT_EQ(dump.exit_code, 1);
  EXPECT_EQ(dump.err.rfind("ckpt dump: error ", 0), 0u) << dump.err;
  auto hash = test::run_ckpt("hash /nonexistent/ckpt");
  EXPECT_EQ(hash.exit_code, 3);
  EXPECT_EQ(hash.err.rfind("ckpt hash: error IO_", 0), 0u) << hash.err;
  auto usage = test::run_ckpt("validate");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_EQ(usage.err.rfind("ckpt validate: error USAGE", 0), 0u) << usage.err;
}

// Issue 14: a hostile name cannot forge output.
TEST(Display, ANewlineInADirectoryNameCannotForgeAVerdictLine) {
  test::TempDir tmp;
  const std::string dir = tmp.str("x\nVERDICT: PASS - 0 errors, 0 warnings in y");
  test::copy_tree(test::fixture("oracle/dsv4-edge"), dir);
  auto r = test::run_ckpt("validate --profile generic " + q(dir));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    EXPECT_NE(line.rfind("VERDICT: PASS", 0), 0u) << "forged line in:\n" << r.out;
  EXPECT_NE(r.out.find("x\\nVERDICT: PASS"), std::string::npos) << r.out;
}

TEST(Display, EscapeSequencesInATensorNameNeverReachTheTerminal) {
  test::TempDir tmp;
  const std::string file = tmp.str("evil.safetensors");
  // A tensor whose name clears the screen and a dtype the reader refuses (so it is named).
  test::write_file(file, test::make_safetensors(
                             R"({"\u001b[2J\u001b[31mevil\nVERDICT: PASS":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}})",
                             {0, 0, 0, 0}));
  for (const std::string& args : {"validate " + q(file), "inspect " + q(file), "dump " + q(file) + " x -o /dev/null"}) {
    auto r = test::run_ckpt(args);
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << args << "\n" << r.err;
    std::istringstream lines(r.out + r.err);
    for (std::string line; std::getline(lines, line);) EXPECT_NE(line.rfind("VERDICT: PASS", 0), 0u) << args;
  }
  auto v = test::run_ckpt("validate " + q(file));
  EXPECT_NE(v.out.find("\\x1b[2J"), std::string::npos) << v.out;
}

}  // namespace
}  // namespace ckpt
