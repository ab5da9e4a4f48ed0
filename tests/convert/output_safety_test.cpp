// The output directory is never left lying: --overwrite removes what the new plan does not
// produce (and the index and config first), never writes into a checkpoint ckptkit did not
// write, two runs into one OUT cannot both write, SIGINT/SIGTERM leave no temporaries, shard
// names of NAME_MAX bytes convert, and an FP8 product beyond BF16 is an error, not inf.
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "child_process.h"
#include "convert/convert.h"
#include "convert/records.h"
#include "io/atomic_file.h"
#include "numerics/fp8.h"
#include "file_tree.h"
#include "test_util.h"
#include "validate/validate.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using test::describe;
const auto q = test::shell_quote;

std::vector<std::string> temporaries_under(const std::string& dir) {
  std::vector<std::string> temps;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(".ckpt-tmp-") || name.find(".tmp.") != std::string::npos) temps.push_back(e.path().string());
  }
  return temps;
}

bool validates(const std::string& dir) {
  auto v = test::run_ckpt("validate -q --profile generic " + q(dir));  // structure: files, index, headers
  return v.exit_code == 0;
}

TEST(Convert, OverwriteRemovesWhatTheNewPlanDoesNotProduce) {
  test::TempDir tmp;
  const std::string out = tmp.str("out");
  ASSERT_EQ(test::run_ckpt("convert -q " + q(test::fixture("oracle/dsv4-tiny")) + " " + q(out)).exit_code, 0);
  test::write_text(out + "/NOTES.md", "mine\n");  // not ckptkit's: stays
  auto r = test::run_ckpt("convert -q --overwrite " + q(test::fixture("oracle/dsv4-edge")) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(test::run_ckpt("convert -q " + q(test::fixture("oracle/dsv4-edge")) + " " + q(tmp.str("fresh"))).exit_code, 0);
  auto want = test::file_tree(tmp.str("fresh"));
  want["NOTES.md"] = test::read_file(out + "/NOTES.md");
  EXPECT_TRUE(test::file_tree(out) == want) << "the 7-shard output's files survived the 2-shard --overwrite";
  EXPECT_TRUE(validates(out));
  size_t records = 0;
  for (const auto& e : fs::directory_iterator(out + "/.ckptkit/records")) records += e.path().extension() == ".json";
  EXPECT_EQ(records, 2u);
  // A later --resume over the pruned output finds everything done.
  r = test::run_ckpt("convert --resume " + q(test::fixture("oracle/dsv4-edge")) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 0 shards (2 already done)"), std::string::npos) << r.out;
}

// At every kill point of an --overwrite with another plan, OUT either has no index and no
// config.json, or is a complete checkpoint that validates.
TEST(Convert, InterruptedOverwriteNeverLooksComplete) {
  test::TempDir tmp;
  const std::string old_in = test::fixture("oracle/dsv4-tiny"), new_in = test::fixture("oracle/dsv4-edge");
  ASSERT_EQ(test::run_ckpt("convert -q " + q(old_in) + " " + q(tmp.str("old"))).exit_code, 0);
  int kills = 0;
  for (int k = 1; k < 100; ++k) {
    SCOPED_TRACE("kill point " + std::to_string(k));
    const std::string out = tmp.str("out" + std::to_string(k));
    fs::copy(tmp.str("old"), out, fs::copy_options::recursive);
    auto killed = test::run_ckpt_env("CKPT_TEST_KILL_AT=" + std::to_string(k), "convert -q --overwrite " + q(new_in) + " " + q(out));
    if (killed.exit_code == 0) break;
    ASSERT_EQ(killed.exit_code, 128 + 9) << killed.err;
    ++kills;
    if (fs::exists(out + "/config.json") || fs::exists(out + "/model.safetensors.index.json")) {
      EXPECT_TRUE(validates(out)) << "an interrupted --overwrite left a complete-looking mix";
    }
    auto again = test::run_ckpt("convert -q --overwrite " + q(new_in) + " " + q(out));
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_TRUE(validates(out));
    EXPECT_TRUE(temporaries_under(out).empty());
    fs::remove_all(out);
  }
  EXPECT_GE(kills, 8);
}

// IN and OUT swapped: the original checkpoint is "OUT". No flag makes ckptkit write into it.
TEST(Convert, OverwriteRefusesAnUnconvertedCheckpoint) {
  test::TempDir tmp;
  const std::string orig = tmp.str("orig"), conv = tmp.str("conv");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), orig);
  ASSERT_EQ(test::run_ckpt("convert -q " + q(orig) + " " + q(conv)).exit_code, 0);
  const auto before = test::file_tree(orig);
  for (const char* flags : {"--overwrite", "--resume", "--partition 0/2", "--finalize", ""}) {
    SCOPED_TRACE(flags);
    auto r = test::run_ckpt("convert -q " + std::string(flags) + " " + q(conv) + " " + q(orig));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("CONVERT_OUTPUT_FOREIGN"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("holds a checkpoint that ckptkit did not write"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("are IN and OUT swapped?"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(test::file_tree(orig) == before) << "the original checkpoint was changed";
  EXPECT_FALSE(fs::exists(orig + "/.ckptkit"));
  // A directory with other files (no checkpoint) may still be overwritten.
  fs::create_directories(tmp.str("misc"));
  test::write_text(tmp.str("misc/README"), "x\n");
  EXPECT_EQ(test::run_ckpt("convert -q --overwrite " + q(orig) + " " + q(tmp.str("misc"))).exit_code, 0);
  // And a previous ckptkit output is overwritable, of course.
  EXPECT_EQ(test::run_ckpt("convert -q --overwrite " + q(orig) + " " + q(conv)).exit_code, 0);
}

TEST(Convert, ConcurrentRunIntoTheSameOutIsRefused) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  test::ChildCkpt first({"CKPT_TEST_STOP_AT=2"}, {"convert", "-q", in, out}, tmp.str());  // inside shard 1
  ASSERT_TRUE(first.wait_until_stopped()) << "the first run did not stop at its kill point: " << first.err();
  const std::string holder = "pid " + std::to_string(first.pid()) + " ckpt convert";
  // (A run without flags is refused before it looks at the lock: OUT is not empty.)
  for (const char* flags : {"--resume", "--overwrite", "--partition 1/2", "--finalize"}) {
    SCOPED_TRACE(flags);
    auto r = test::run_ckpt("convert -q " + std::string(flags) + " " + q(in) + " " + q(out));
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("CONVERT_OUTPUT_LOCKED"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(holder), std::string::npos) << r.err;
  }
  EXPECT_EQ(first.finish(), 0) << first.err();
  EXPECT_TRUE(validates(out));
  ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("fresh"))).exit_code, 0);
  EXPECT_TRUE(test::file_tree(out) == test::file_tree(tmp.str("fresh")));
}

TEST(Convert, TwoRunsOfOnePartitionAreRefusedButPartitionsRunSideBySide) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  test::ChildCkpt part0({"CKPT_TEST_STOP_AT=2"}, {"convert", "-q", "--partition", "0/2", in, out}, tmp.str());
  ASSERT_TRUE(part0.wait_until_stopped()) << part0.err();
  auto other = test::run_ckpt("convert -q --partition 1/2 " + q(in) + " " + q(out));
  EXPECT_EQ(other.exit_code, 0) << other.err;  // the other partition works meanwhile
  auto twin = test::run_ckpt("convert -q --partition 0/2 " + q(in) + " " + q(out));
  EXPECT_EQ(twin.exit_code, 2) << twin.err;
  EXPECT_NE(twin.err.find("is being converted by another run (pid " + std::to_string(part0.pid()) +
                          " ckpt convert --partition 0/2"),
            std::string::npos)
      << twin.err;
  EXPECT_EQ(part0.finish(), 0) << part0.err();
  auto fin = test::run_ckpt("convert -q --finalize " + q(in) + " " + q(out));
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  EXPECT_TRUE(validates(out));
}

// Temporaries are named by their destination's hash: a partition removes its own stale ones
// and leaves those of the shards another partition is writing right now.
TEST(Convert, APartitionRemovesOnlyItsOwnStaleTemporaries) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  fs::create_directories(out + "/.ckptkit/records");
  // 0/3 owns shards 1, 3, 5; 1/3 owns 2 and 6 (the LPT assignment of Partition tests).
  AtomicOutput theirs(out + "/model-00002-of-00007.safetensors");
  AtomicOutput their_record(record_path(out, "model-00006-of-00007.safetensors"));
  AtomicOutput mine(out + "/model-00001-of-00007.safetensors");
  std::string error;
  ASSERT_TRUE(theirs.open(error) && their_record.open(error) && mine.open(error)) << error;
  // A temporary of shard 1 left by a killed run: same destination tag, another random part.
  std::string stale = mine.temp_path();
  stale.replace(stale.size() - 8, 8, "deadbeef");
  test::write_text(stale, "partial");
  ASSERT_EQ(test::run_ckpt("convert -q --partition 0/3 " + q(in) + " " + q(out)).exit_code, 0);
  EXPECT_TRUE(fs::exists(theirs.temp_path()));
  EXPECT_TRUE(fs::exists(their_record.temp_path()));
  EXPECT_FALSE(fs::exists(stale));
}

// A run frozen while it writes shard 1 (kill point 3: "shard payload partly written") gets
// SIGTERM or SIGINT: it removes its temporary, dies of the signal, and --resume finishes.
TEST(Convert, SignalsRemoveTemporariesAndResumeStillWorks) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("clean"))).exit_code, 0);
  const auto clean = test::file_tree(tmp.str("clean"));
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string out = tmp.str("out" + std::to_string(sig));
    test::ChildCkpt run({"CKPT_TEST_STOP_AT=3"}, {"convert", "-q", in, out}, tmp.str());
    ASSERT_TRUE(run.wait_until_stopped()) << run.err();
    ASSERT_EQ(temporaries_under(out).size(), 1u) << "the shard being written has one temporary";
    run.signal(sig);  // pending while stopped; handled once continued
    EXPECT_EQ(run.finish(), 128 + sig) << run.err();
    EXPECT_TRUE(run.died_of(sig)) << "the process must die of the signal, as a shell expects";
    EXPECT_TRUE(temporaries_under(out).empty()) << temporaries_under(out)[0];
    auto resumed = test::run_ckpt("convert -q --resume " + q(in) + " " + q(out));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_TRUE(test::file_tree(out) == clean);
  }
}

// The validator accepts shard names of up to 255 bytes (NAME_MAX); so does the converter:
// temporaries have short names of their own, records of long names are named by a hash.
TEST(Convert, ShardNamesOfNameMaxBytesConvert) {
  test::TempDir tmp;
  const std::string in = tmp.str("in"), out = tmp.str("out");
  test::copy_tree(test::fixture("oracle/dsv3-tiny"), in);
  std::string index = test::read_text(in + "/model.safetensors.index.json");
  std::vector<std::string> long_names;
  for (const char* n : {"1", "2"}) {
    const std::string old_name = std::string("model-0000") + n + "-of-00002.safetensors";
    const std::string name = std::string(241, 'w') + "-" + n + ".safetensors";
    ASSERT_EQ(name.size(), 255u);
    fs::rename(in + "/" + old_name, in + "/" + name);
    for (size_t at; (at = index.find(old_name)) != std::string::npos;) index.replace(at, old_name.size(), name);
    long_names.push_back(name);
  }
  test::write_text(in + "/model.safetensors.index.json", index);
  auto r = test::run_ckpt("convert -q " + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& name : long_names) {
    EXPECT_TRUE(fs::exists(out + "/" + name)) << name;
    EXPECT_TRUE(fs::exists(record_path(out, name))) << name;
  }
  EXPECT_TRUE(validates(out));
  r = test::run_ckpt("convert --resume " + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 0 shards (2 already done)"), std::string::npos) << r.out;
}

// 2^127 · |w| is beyond BF16 for every |w| >= 2: refused naming the scale, its element and
// byte, as the MXFP4 path refuses the same overflow; nothing at the shard's final name.
TEST(Convert, Fp8OverflowIsAnErrorNamingTensorAndElement) {
  test::TempDir tmp;
  const std::string in = tmp.str("in");
  test::copy_tree(test::fixture("oracle/dsv4-tiny"), in);
  auto m = test::load_model_checked(in);
  const ModelTensor* w = m->view.find("layers.0.attn.wq_a.weight");  // [128, 256], scale [1, 2]
  const ModelTensor* s = m->view.find("layers.0.attn.wq_a.scale");
  ASSERT_TRUE(w && s);
  const auto codes = test::tensor_bytes(*m, *w);
  uint64_t first = UINT64_MAX;
  for (uint64_t i = 0; i < codes.size() && first == UINT64_MAX; ++i)
    if (i % 256 >= 128 && (fp8_e8m0_product_bf16(codes[i], 254) & 0x7FFF) == 0x7F80) first = i;
  ASSERT_NE(first, UINT64_MAX);
  const std::string path = m->view.file_paths[s->file];
  const uint64_t scale_at = s->offset + 1;  // block column 1: columns 128..255
  m.reset();
  auto bytes = test::read_file(path);
  bytes[scale_at] = 254;
  test::write_file(path, bytes);
  ConvertOptions o;
  o.input = in;
  o.output = tmp.str("out");
  auto r = convert_checkpoint(o);
  EXPECT_EQ(r.status, ConvertStatus::input_error);
  const std::string text = describe(r.findings);
  // The scale rule (numerics/scale_rule.h) refuses the scale itself, before any weight is read:
  // 448 x 2^127 is beyond BF16, whichever codes its block holds.
  EXPECT_NE(text.find("scale layers.0.attn.wq_a.scale at row 0, block 1 (byte " + std::to_string(scale_at) +
                      "), used by layers.0.attn.wq_a.weight"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("beyond BF16's largest finite value"), std::string::npos) << text;
  EXPECT_FALSE(fs::exists(tmp.str("out/model-00002-of-00007.safetensors")));
}

}  // namespace
}  // namespace ckpt
