// What a conversion trusts in OUT and IN between its plan and its last rename: OUT's state
// files are opened like inputs (a FIFO there is an error, never a hang), a side file replaced
// after the plan is not copied, OUT's contents are judged under its lock, every completion
// marker is withdrawn first, a file ckptkit did not write is never replaced, config.json is
// read once, and no output is more readable than the input it comes from.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "child_process.h"
#include "file_tree.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

// A FIFO the test holds open for reading (so a writer never blocks): whatever a run writes
// into it can be read back.
class HeldFifo {
 public:
  explicit HeldFifo(const std::string& path) {
    fs::remove(path);
    if (::mkfifo(path.c_str(), 0644) == 0) fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
  }
  ~HeldFifo() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  std::string written() const {
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd_, buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
    return all;
  }

 private:
  int fd_ = -1;
};

// A FIFO as OUT/.ckptkit/manifest.json or as a shard's record: `convert --resume` stops with
// an error naming it (exit 3), and writes nothing into it (before: it wrote the manifest or
// the record into the FIFO, and without a reader hung forever in open()).
TEST(ConvertState, AFifoAsAStateFileIsAnErrorNotAHang) {
  const std::string in = test::fixture("oracle/dsv4-edge");
  for (const std::string state : {".ckptkit/manifest.json", ".ckptkit/records/model-00001-of-00002.safetensors.json"}) {
    SCOPED_TRACE(state);
    test::TempDir tmp;
    const std::string out = tmp.str("out");
    ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(out)).exit_code, 0);
    HeldFifo fifo(out + "/" + state);
    ASSERT_TRUE(fifo.ok());
    auto r = test::run_ckpt("convert -q --resume " + q(in) + " " + q(out));
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("IO_NOT_REGULAR"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(state + " is a FIFO"), std::string::npos) << r.err;
    EXPECT_EQ(fifo.written(), "") << "the run wrote into the FIFO";
  }
}

// OUT/.ckptkit/records or OUT/.ckptkit/locks as a symlink: refused (exit 3, named) with
// nothing created where it points (before: a --partition run made its shard locks there).
TEST(ConvertState, AStateSubdirectoryThatIsALinkIsNotWrittenThrough) {
  const std::string in = test::fixture("oracle/dsv4-tiny");
  for (const std::string sub : {"records", "locks"}) {
    for (const std::string mode : {"", "--partition 0/2 "}) {
      SCOPED_TRACE(sub + " " + mode);
      test::TempDir tmp;
      const std::string out = tmp.str("out"), elsewhere = tmp.str("elsewhere");
      fs::create_directories(out + "/.ckptkit");
      fs::create_directories(elsewhere);
      fs::create_directory_symlink(elsewhere, out + "/.ckptkit/" + sub);
      auto r = test::run_ckpt("convert -q " + mode + q(in) + " " + q(out));
      EXPECT_EQ(r.exit_code, 3) << r.err;
      EXPECT_NE(r.err.find(".ckptkit/" + sub + " is a symlink"), std::string::npos) << r.err;
      EXPECT_TRUE(fs::is_empty(elsewhere));
    }
  }
}

// A side file replaced after the plan (by a link to a 0600 secret outside IN, or by another
// file) is not copied: the copy opens the planned file without following a link and checks
// its device and inode (before: the secret was copied into OUT, exit 0).
TEST(ConvertState, ASideFileReplacedAfterThePlanIsNotCopied) {
  for (const bool link : {true, false}) {
    SCOPED_TRACE(link ? "symlink" : "other file");
    test::TempDir tmp;
    const std::string in = tmp.str("in"), out = tmp.str("out"), secret = tmp.str("secret");
    test::copy_tree(test::fixture("oracle/dsv4-edge"), in);
    test::write_text(secret, "TOP SECRET\n");
    fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
    test::ChildCkpt run({"CKPT_TEST_STOP_AT=1"}, {"convert", "-q", in, out}, tmp.str());  // planned, OUT locked
    ASSERT_TRUE(run.wait_until_stopped()) << run.err();
    if (link)
      fs::create_symlink(secret, in + "/new");
    else
      fs::copy_file(secret, in + "/new");
    fs::rename(in + "/new", in + "/tokenizer.json");
    EXPECT_EQ(run.finish(), 3) << run.err();
    EXPECT_NE(run.err().find("tokenizer.json"), std::string::npos) << run.err();
    for (const auto& [name, bytes] : test::file_tree(out))
      EXPECT_NE(std::string(bytes.begin(), bytes.end()), "TOP SECRET\n") << name << " holds the secret";
  }
}

// A second run that checked OUT (empty then) before the first one finished decides under the
// lock, after the first released it: OUT is no longer empty, so without --overwrite it is
// refused and the first run's output stays (before: it replaced it, exit 0).
TEST(ConvertState, ARunThatCheckedOutBeforeAnotherFinishedIsRefusedUnderTheLock) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-edge"), out = tmp.str("out");
  test::ChildCkpt second({"CKPT_TEST_STOP_WHERE=planned, output not locked"}, {"convert", "-q", in, out}, tmp.str());
  ASSERT_TRUE(second.wait_until_stopped()) << "no stop before the lock: " << second.err();
  auto first = test::run_ckpt("convert -q " + q(in) + " " + q(out));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto written = test::file_tree(out);
  EXPECT_EQ(second.finish(), 2) << second.err();
  EXPECT_NE(second.err().find("CONVERT_OUTPUT_NOT_EMPTY"), std::string::npos) << second.err();
  EXPECT_TRUE(test::file_tree(out) == written);
}

// A Mistral-native layout (params.json, consolidated shards): an FP8 weight with its
// per-tensor F32 qscale_weight in each of two shards; `code` varies the values.
void write_native(const std::string& dir, uint8_t code) {
  fs::create_directories(dir);
  test::write_text(dir + "/params.json",
                   R"({"dim": 32, "n_layers": 2, "head_dim": 8, "hidden_dim": 64, "n_heads": 4, "n_kv_heads": 2, )"
                   R"("norm_eps": 1e-05, "vocab_size": 128, "rope_theta": 1000000.0, )"
                   R"("quantization": {"qformat_weight": "fp8_e4m3", "qscheme_act": "TENSOR"}})"
                   "\n");
  for (int s = 1; s <= 2; ++s) {
    const std::string layer = "model.layers." + std::to_string(s - 1) + ".mlp.up_proj";
    std::vector<uint8_t> payload(8 * 32, static_cast<uint8_t>(code + s));
    for (uint8_t b : {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x80, 0x3F}) payload.push_back(b);  // 1.0f, 1.0f
    const std::string header = R"({")" + layer + R"(.weight":{"dtype":"F8_E4M3","shape":[8,32],"data_offsets":[0,256]},")" +
                               layer + R"(.qscale_weight":{"dtype":"F32","shape":[],"data_offsets":[256,260]},")" +
                               layer + R"(.qscale_act":{"dtype":"F32","shape":[],"data_offsets":[260,264]}})";
    test::write_file(dir + "/consolidated-0000" + std::to_string(s) + "-of-00002.safetensors",
                     test::make_safetensors(header, payload));
  }
}

// At every kill point of an --overwrite of a Mistral-native output, OUT either has no
// params.json or is exactly one conversion (the old, untouched, or the new): params.json is withdrawn with the
// index and config.json before a shard changes (before: the old params.json stayed over a
// mix of both runs' shards, and `validate OUT` passed).
TEST(ConvertState, InterruptedOverwriteOfAMistralNativeOutputNeverLooksComplete) {
  test::TempDir tmp;
  const std::string old_in = tmp.str("old_in"), new_in = tmp.str("new_in");
  write_native(old_in, 0x30);
  write_native(new_in, 0x40);
  for (const auto& [from, to] : {std::pair{old_in, tmp.str("old")}, std::pair{new_in, tmp.str("fresh")}}) {
    auto r = test::run_ckpt("convert -q --experts bf16 " + q(from) + " " + q(to));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(fs::exists(to + "/params.json"));
  }
  const auto fresh = test::file_tree(tmp.str("fresh")), old = test::file_tree(tmp.str("old"));
  int kills = 0;
  for (int k = 1; k < 50; ++k) {
    SCOPED_TRACE("kill point " + std::to_string(k));
    const std::string out = tmp.str("out" + std::to_string(k));
    fs::copy(tmp.str("old"), out, fs::copy_options::recursive);
    auto killed = test::run_ckpt_env("CKPT_TEST_KILL_AT=" + std::to_string(k),
                                     "convert -q --overwrite --experts bf16 " + q(new_in) + " " + q(out));
    if (killed.exit_code == 0) break;
    ASSERT_EQ(killed.exit_code, 128 + 9) << killed.err;
    ++kills;
    if (fs::exists(out + "/params.json")) {  // withdrawn first, written last: one whole output
      const auto now = test::file_tree(out);
      EXPECT_TRUE(now == fresh || now == old) << "an interrupted --overwrite left a complete-looking mix";
    }
  }
  EXPECT_GE(kills, 4);
}

// --overwrite (or --resume) never replaces a file that ckptkit did not write: a name the
// conversion writes that OUT/.ckptkit/ does not list is refused before anything is written,
// naming it (before: the user's README.md was replaced by IN's, exit 0).
TEST(ConvertState, OverwriteNeverReplacesAFileCkptkitDidNotWrite) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-edge"), in);
  ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(out)).exit_code, 0);
  test::write_text(in + "/README.md", "the model card\n");
  test::write_text(out + "/README.md", "my notes\n");
  const auto before = test::file_tree(out);
  for (const char* flag : {"--overwrite", "--resume"}) {
    SCOPED_TRACE(flag);
    auto r = test::run_ckpt("convert -q " + std::string(flag) + " " + q(in) + " " + q(out));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("CONVERT_OUTPUT_USER_FILE"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("README.md"), std::string::npos) << r.err;
    EXPECT_TRUE(test::file_tree(out) == before) << "OUT was changed";
  }
  // Moved away, the same run proceeds; a later --overwrite replaces what ckptkit wrote.
  fs::remove(out + "/README.md");
  EXPECT_EQ(test::run_ckpt("convert -q --overwrite " + q(in) + " " + q(out)).exit_code, 0);
  EXPECT_EQ(test::read_text(out + "/README.md"), "the model card\n");
  EXPECT_EQ(test::run_ckpt("convert -q --overwrite " + q(in) + " " + q(out)).exit_code, 0);
}

// config.json is read once, with the plan: removed from IN after the plan, it is still
// written to OUT, rewritten from the bytes the plan read (before: a second read failed
// silently and the run ended with exit 0 and no config.json).
TEST(ConvertState, ConfigJsonIsRewrittenFromTheBytesThePlanRead) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv4-edge"), in);
  ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("fresh"))).exit_code, 0);
  test::ChildCkpt run({"CKPT_TEST_STOP_WHERE=planned, output not locked"}, {"convert", "-q", in, out}, tmp.str());
  ASSERT_TRUE(run.wait_until_stopped()) << run.err();
  fs::remove(in + "/config.json");
  EXPECT_EQ(run.finish(), 0) << run.err();
  ASSERT_TRUE(fs::exists(out + "/config.json")) << "convert ended without writing config.json";
  EXPECT_EQ(test::read_file(out + "/config.json"), test::read_file(tmp.str("fresh/config.json")));
}

mode_t umask_now() {
  const mode_t m = ::umask(022);
  ::umask(m);
  return m;
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 07777;
}

// Private weights stay private: IN's files at 0600 give 0600 output files (shards, index,
// config, records, manifest) in a 0700 OUT; at 0640, 0640 files in a 0750 OUT (before: 0644
// files in a 0755 OUT, readable by every user).
TEST(ConvertState, OutputsAreNoMoreReadableThanTheInputs) {
  const mode_t mask = umask_now();
  for (const mode_t in_mode : {mode_t{0600}, mode_t{0640}, mode_t{0644}}) {
    SCOPED_TRACE(in_mode);
    test::TempDir tmp;
    const std::string in = tmp.str("in"), out = tmp.str("out");
    test::copy_tree(test::fixture("oracle/dsv4-edge"), in);
    for (const auto& e : fs::directory_iterator(in)) fs::permissions(e.path(), static_cast<fs::perms>(in_mode));
    auto r = test::run_ckpt("convert -q " + q(in) + " " + q(out));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const mode_t want = in_mode & ~mask;
    size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(out)) {
      // The lock file holds only "pid N ckpt convert", for a refused run to name its holder.
      if (!e.is_regular_file() || e.path().filename() == "lock") continue;
      EXPECT_EQ(mode_of(e.path()), want) << e.path();
      ++files;
    }
    EXPECT_GE(files, 8u);  // 2 shards, index, config, 3 side files, 2 records, manifest
    EXPECT_EQ(mode_of(out), (0700 | (in_mode & 0040 ? 0050 : 0) | (in_mode & 0004 ? 0005 : 0)) & ~mask);
  }
}

}  // namespace
}  // namespace ckpt
