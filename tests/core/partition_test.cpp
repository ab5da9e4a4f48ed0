// Scale-out: the partition assignment, --partition env, and the end-to-end property the
// issue asks for: N = 1, 2, 3, 7 (and 10, with empty partitions) partitions run as
// separate processes, then --finalize, give an output byte-identical (every file) to a
// single-process conversion, and the merged deep-validation report equals the
// single-process one. Finalize refuses missing, partial and mismatched shards.
#include "core/partition.h"

#include <filesystem>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "file_tree.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
const auto q = test::shell_quote;

TEST(Partition, ParsesIOverN) {
  PartitionSpec s;
  std::string error;
  ASSERT_TRUE(parse_partition("0/1", s, error)) << error;
  EXPECT_EQ(s.index, 0u);
  EXPECT_EQ(s.count, 1u);
  ASSERT_TRUE(parse_partition("6/7", s, error)) << error;
  EXPECT_EQ(s.text(), "6/7");
  for (const char* bad : {"", "3", "7/7", "8/7", "0/0", "-1/3", "1/-3", "a/3", "1/3x", "1 /3", "1/100001", "/3", "1/"}) {
    EXPECT_FALSE(parse_partition(bad, s, error)) << bad;
    EXPECT_NE(error.find("I/N"), std::string::npos) << bad;
  }
}

TEST(Partition, LptBalancesBytesAndIsDeterministic) {
  // LPT over 9,7,6,5,4,3,2: 9->b0, 7->b1, 6->b2, 5->b2 (11), 4->b1 (11), 3->b0 (12), 2->b1 (13).
  std::vector<uint64_t> w{5, 9, 2, 7, 3, 6, 4};
  std::vector<std::string> names{"e", "a", "g", "b", "f", "c", "d"};
  auto bins = assign_partitions(w, names, 3);
  EXPECT_EQ(bins, (std::vector<uint32_t>{2, 0, 1, 1, 0, 2, 1}));
  auto totals = partition_bins(bins, w, 3);
  EXPECT_EQ(totals[0].bytes, 12u);
  EXPECT_EQ(totals[1].bytes, 13u);
  EXPECT_EQ(totals[2].bytes, 11u);
  // Input order does not matter: the same item lands in the same bin.
  std::vector<uint64_t> w2(w.rbegin(), w.rend());
  std::vector<std::string> n2(names.rbegin(), names.rend());
  auto bins2 = assign_partitions(w2, n2, 3);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(bins2[w.size() - 1 - i], bins[i]) << names[i];
  // Equal weights: by name, ties to the lowest bin.
  EXPECT_EQ(assign_partitions({1, 1, 1}, {"c", "a", "b"}, 2), (std::vector<uint32_t>{0, 0, 1}));
  // N = 1: everything in bin 0; N above the item count: the extra bins stay empty.
  EXPECT_EQ(assign_partitions({3, 2}, {"a", "b"}, 1), (std::vector<uint32_t>{0, 0}));
  auto wide = partition_bins(assign_partitions({3, 2}, {"a", "b"}, 5), {3, 2}, 5);
  EXPECT_EQ(wide[0].items.size() + wide[1].items.size(), 2u);
  for (int b = 2; b < 5; ++b) EXPECT_TRUE(wide[b].items.empty()) << b;
}

EnvLookup fake_env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(Partition, FromSlurmAndKubernetesEnvironments) {
  PartitionSpec s;
  std::string error;
  // A whole Slurm array 0..6.
  ASSERT_TRUE(partition_from_env(fake_env({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "7"},
                                           {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_MAX", "6"}}),
                                 std::nullopt, s, error))
      << error;
  EXPECT_EQ(s.text(), "3/7");
  // A resubmission of index 3 alone: COUNT is 1, so the count must come from elsewhere.
  auto resubmit = fake_env({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "1"},
                            {"SLURM_ARRAY_TASK_MIN", "3"}, {"SLURM_ARRAY_TASK_MAX", "3"}});
  EXPECT_FALSE(partition_from_env(resubmit, std::nullopt, s, error));
  EXPECT_NE(error.find("CKPT_PARTITIONS"), std::string::npos) << error;
  ASSERT_TRUE(partition_from_env(resubmit, 7u, s, error)) << error;
  EXPECT_EQ(s.text(), "3/7");
  ASSERT_TRUE(partition_from_env(fake_env({{"SLURM_ARRAY_TASK_ID", "3"}, {"CKPT_PARTITIONS", "7"},
                                           {"SLURM_ARRAY_TASK_COUNT", "1"}}),
                                 std::nullopt, s, error))
      << error;
  EXPECT_EQ(s.text(), "3/7");
  // Kubernetes Indexed Job: the index from JOB_COMPLETION_INDEX, the count from CKPT_PARTITIONS.
  ASSERT_TRUE(partition_from_env(fake_env({{"JOB_COMPLETION_INDEX", "2"}, {"CKPT_PARTITIONS", "4"}}), std::nullopt, s,
                                 error))
      << error;
  EXPECT_EQ(s.text(), "2/4");
  EXPECT_FALSE(partition_from_env(fake_env({{"JOB_COMPLETION_INDEX", "2"}}), std::nullopt, s, error));
  EXPECT_NE(error.find("CKPT_PARTITIONS"), std::string::npos) << error;
  // Out of range, garbage, nothing set.
  EXPECT_FALSE(partition_from_env(fake_env({{"JOB_COMPLETION_INDEX", "4"}, {"CKPT_PARTITIONS", "4"}}), std::nullopt, s,
                                  error));
  EXPECT_NE(error.find("not below the count 4"), std::string::npos) << error;
  EXPECT_FALSE(partition_from_env(fake_env({{"SLURM_ARRAY_TASK_ID", "x"}}), 3u, s, error));
  EXPECT_FALSE(partition_from_env(fake_env({}), 3u, s, error));
  EXPECT_NE(error.find("SLURM_ARRAY_TASK_ID"), std::string::npos) << error;
}

// summary.seconds is wall time: the one field a merged report may differ in.
std::string without_seconds(std::string json) {
  auto at = json.find("\"seconds\":");
  if (at == std::string::npos) return json;
  auto end = json.find_first_of(",}", at);
  return json.replace(at, end - at, "\"seconds\":0");
}

std::string text_of(const std::string& path) {
  auto b = test::read_file(path);
  return std::string(b.begin(), b.end());
}

TEST(Partition, SeparateProcessesThenFinalizeEqualOneProcess) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny");
  ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("single"))).exit_code, 0);
  auto single = test::file_tree(tmp.str("single"));
  ASSERT_EQ(single.size(), 7u + 5u);  // shards, index, config, tokenizer, tokenizer_config, generation_config
  auto v = test::run_ckpt("validate -q --deep --json " + q(tmp.str("single.json")) + " " + q(in));
  ASSERT_EQ(v.exit_code, 0) << v.out << v.err;
  const std::string single_report = without_seconds(text_of(tmp.str("single.json")));

  for (unsigned n : {1u, 2u, 3u, 7u, 10u}) {
    SCOPED_TRACE("N = " + std::to_string(n));
    std::string out = tmp.str("out" + std::to_string(n));
    std::string parts;
    for (unsigned i = 0; i < n; ++i) {
      std::string part = std::to_string(i) + "/" + std::to_string(n);
      auto r = test::run_ckpt("convert -q --partition " + part + " " + q(in) + " " + q(out));
      ASSERT_EQ(r.exit_code, 0) << part << "\n" << r.out << r.err;
      // Nothing final before --finalize.
      EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json")) << part;
      EXPECT_FALSE(fs::exists(out + "/config.json")) << part;
      EXPECT_FALSE(fs::exists(out + "/tokenizer.json")) << part;
      std::string json = tmp.str("part-" + std::to_string(n) + "-" + std::to_string(i) + ".json");
      auto pv = test::run_ckpt("validate -q --deep --partition " + part + " --json " + q(json) + " " + q(in));
      ASSERT_EQ(pv.exit_code, 0) << part << "\n" << pv.out << pv.err;
      parts += " " + q(json);
    }
    auto fin = test::run_ckpt("convert --finalize " + q(in) + " " + q(out));
    ASSERT_EQ(fin.exit_code, 0) << fin.out << fin.err;
    EXPECT_NE(fin.out.find("verified 7 shards"), std::string::npos) << fin.out;
    EXPECT_EQ(test::file_tree(out), single) << "the partitioned output differs from the single-process one";
    auto merged = test::run_ckpt("validate -q --merge" + parts + " --json " + q(tmp.str("merged.json")));
    ASSERT_EQ(merged.exit_code, 0) << merged.out << merged.err;
    EXPECT_EQ(without_seconds(text_of(tmp.str("merged.json"))), single_report);
  }
}

TEST(Partition, EmptyPartitionsSucceedDoingNothing) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-edge");  // 2 shards
  auto plan = test::run_ckpt("convert --dry-run --partition 4/5 " + q(in) + " " + q(tmp.str("out")));
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("* 4/5: 0 shards, 0 bytes"), std::string::npos) << plan.out;
  auto r = test::run_ckpt("convert -q --partition 4/5 " + q(in) + " " + q(tmp.str("out")));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& e : fs::recursive_directory_iterator(tmp.str("out")))
    EXPECT_FALSE(e.is_regular_file()) << e.path() << " written by an empty partition";
}

TEST(Partition, FinalizeRefusesMissingPartialAndMismatchedShardsNamingThePartition) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  // 3 partitions: 0/3 = shards 1, 3, 5; 1/3 = 2, 6; 2/3 = 4, 7 (LPT over output bytes).
  for (int i : {0, 2}) ASSERT_EQ(test::run_ckpt("convert -q --partition " + std::to_string(i) + "/3 " + q(in) + " " + q(out)).exit_code, 0);
  auto r = test::run_ckpt("convert --finalize " + q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("CONVERT_SHARD_MISSING model-00002-of-00007.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shard model-00006-of-00007.safetensors of partition 1/3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rerun partitions 1 of 3"), std::string::npos) << r.err;
  for (const char* final_file : {"model.safetensors.index.json", "config.json", "tokenizer.json"})
    EXPECT_FALSE(fs::exists(out + "/" + final_file)) << final_file << " written although a partition is missing";
  auto json = test::run_ckpt("convert --finalize --json - " + q(in) + " " + q(out));
  EXPECT_NE(json.out.find("\"rerun\":[1]"), std::string::npos) << json.out;

  // Partition 1 done; then a truncated record (partition 0's shard 3) and a damaged output (partition 2's shard 7).
  ASSERT_EQ(test::run_ckpt("convert -q --partition 1/3 " + q(in) + " " + q(out)).exit_code, 0);
  std::string rec = out + "/.ckptkit/records/model-00003-of-00007.safetensors.json";
  auto rec_bytes = test::read_file(rec);
  rec_bytes.resize(rec_bytes.size() / 2);
  test::write_file(rec, rec_bytes);
  std::string shard7 = out + "/model-00007-of-00007.safetensors";
  auto bytes = test::read_file(shard7);
  bytes[bytes.size() - 3] ^= 0x40;
  test::write_file(shard7, bytes);
  r = test::run_ckpt("convert --finalize " + q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("CONVERT_SHARD_INCOMPLETE model-00003-of-00007.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("of partition 0/3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CONVERT_SHARD_MISMATCH model-00007-of-00007.safetensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("of partition 2/3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rerun partitions 0,2 of 3"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out + "/config.json"));

  // Rerunning those two partitions redoes exactly the bad shards; finalize then succeeds.
  for (int i : {0, 2}) {
    auto again = test::run_ckpt("convert --partition " + std::to_string(i) + "/3 " + q(in) + " " + q(out));
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_NE(again.out.find("wrote 1 shards"), std::string::npos) << again.out;
  }
  // Records name the partition that wrote them.
  auto record = test::read_file(out + "/.ckptkit/records/model-00007-of-00007.safetensors.json");
  EXPECT_NE(std::string(record.begin(), record.end()).find("\"partition\":{\"index\":2,\"count\":3}"),
            std::string::npos);
  // --finalize --dry-run: the check alone.
  r = test::run_ckpt("convert --finalize --dry-run " + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("nothing written (dry run)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  r = test::run_ckpt("convert --finalize " + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(test::run_ckpt("convert -q " + q(in) + " " + q(tmp.str("single"))).exit_code, 0);
  EXPECT_EQ(test::file_tree(out), test::file_tree(tmp.str("single")));
}

TEST(Partition, FinalizeWithoutRecordsNeedsTheCountToNameAPartition) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-edge");
  fs::create_directories(tmp.str("out"));
  auto r = test::run_ckpt("convert --finalize " + q(in) + " " + q(tmp.str("out")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("pass --partitions N"), std::string::npos) << r.err;
  r = test::run_ckpt_env("CKPT_PARTITIONS=4", "convert --finalize " + q(in) + " " + q(tmp.str("out")));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("of partition 0/4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("of partition 1/4"), std::string::npos) << r.err;
}

TEST(Partition, APartitionLeavesOtherPartitionsTemporariesAlone) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  fs::create_directories(out + "/.ckptkit/records");
  // In-flight temporaries of partition 1/3 (shard 2 and its record), and a stale one of partition 0/3 (shard 1).
  std::string theirs = out + "/.model-00002-of-00007.safetensors.tmp.4242";
  std::string their_record = out + "/.ckptkit/records/.model-00006-of-00007.safetensors.json.tmp.4242";
  std::string mine = out + "/.model-00001-of-00007.safetensors.tmp.4242";
  for (const auto& p : {theirs, their_record, mine}) test::write_text(p, "partial");
  ASSERT_EQ(test::run_ckpt("convert -q --partition 0/3 " + q(in) + " " + q(out)).exit_code, 0);
  EXPECT_TRUE(fs::exists(theirs));
  EXPECT_TRUE(fs::exists(their_record));
  EXPECT_FALSE(fs::exists(mine));
}

TEST(Partition, EnvironmentDrivesTheCliAndBadCombinationsAreUsageErrors) {
  test::TempDir tmp;
  const std::string in = test::fixture("oracle/dsv4-tiny"), out = tmp.str("out");
  auto r = test::run_ckpt_env("SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=2",
                              "convert --dry-run --partition env " + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("this run is 1/3"), std::string::npos) << r.out;
  r = test::run_ckpt_env("JOB_COMPLETION_INDEX=2", "convert --dry-run --partition env --partitions 3 " + q(in) + " " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("this run is 2/3"), std::string::npos) << r.out;
  r = test::run_ckpt_env("env -u SLURM_ARRAY_TASK_ID -u JOB_COMPLETION_INDEX",
                         "convert --dry-run --partition env " + q(in) + " " + q(out));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(test::run_ckpt("convert --partition 3/3 " + q(in) + " " + q(out)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("convert --partition 0/3 --finalize " + q(in) + " " + q(out)).exit_code, 2);
  EXPECT_EQ(test::run_ckpt("validate --deep --partition 0/2 --reference " + q(in) + " " + q(in)).exit_code, 2);
}

}  // namespace
}  // namespace ckpt
