// repack_experts on the qwen3next fixture (4 layers x 8 experts; IQ3_S/IQ2_S/IQ3_XXS
// gate/up, IQ4_NL/Q4_K/Q6_K/MXFP4 down): every blob part equals its source slice, blobs
// and the file are aligned and readable with O_DIRECT, dense.gguf keeps every other
// tensor and KV, A_log is recovered fail-closed, and the CLI maps statuses to exit codes.
#include "repack/expert_pack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include <gtest/gtest.h>

#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/json.h"
#include "io/hash.h"
#include "io/output_lock.h"
#include "test_util.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = test::fixture("ggml/qwen3next-tiny.gguf");
const std::string kRefJson = test::fixture("ggml/qwen3next-tiny.ref.json");

struct Gguf {
  MappedFile file;
  GgufFile g;
  std::vector<uint8_t> data(const GgufTensorInfo& t) const { return file.read_bytes(g.data_start + t.offset, t.nbytes); }
};

std::unique_ptr<Gguf> open_gguf(const std::string& path) {
  auto out = std::make_unique<Gguf>();
  IoError err;
  EXPECT_TRUE(out->file.open(path, err)) << err.message;
  Findings f;
  auto g = read_gguf(out->file, path, f);
  EXPECT_TRUE(g.has_value()) << path;
  for (const auto& x : f.items()) EXPECT_NE(x.severity, Severity::error) << x.code << " " << x.message;
  if (g) out->g = std::move(*g);
  return out;
}

std::string all_findings(const Findings& f) {
  std::string s;
  for (const auto& x : f.items()) s += x.code + " [" + x.tensor + "] " + x.message + "\n";
  return s;
}

RepackReport repack(const std::string& in, const std::string& out, uint64_t align = 4096, bool fix = true) {
  RepackOptions o;
  o.align = align;
  o.fix_a_log = fix;
  return repack_experts(in, out, o);
}

bool same(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = std::numeric_limits<int32_t>::min() - ia;
  if (ib < 0) ib = std::numeric_limits<int32_t>::min() - ib;
  return std::llabs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

struct Manifest {
  JsonDoc doc;
  simdjson::dom::element root() const { return doc.root(); }
};

std::unique_ptr<Manifest> read_manifest(const std::string& dir) {
  auto m = std::make_unique<Manifest>();
  auto bytes = test::read_file(dir + "/manifest.json");
  std::string error;
  EXPECT_TRUE(m->doc.parse(std::string(bytes.begin(), bytes.end()), error)) << error;
  return m;
}

uint64_t u64(simdjson::dom::element e, const char* key) { return e[key].get_uint64().value(); }
std::string str(simdjson::dom::element e, const char* key) { return std::string(e[key].get_string().value()); }
// The elements of array member `key`, copied out (iterating a temporary array trips gcc 12's
// -Wdangling-pointer inside simdjson).
std::vector<simdjson::dom::element> items(simdjson::dom::element e, const char* key) {
  simdjson::dom::array arr;
  EXPECT_FALSE(e[key].get_array().get(arr)) << key;
  std::vector<simdjson::dom::element> out;
  for (auto x : arr) out.push_back(x);
  return out;
}

// One pack of the fixture, shared by the read-only tests of this suite.
class ExpertPack : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new test::TempDir();
    report_ = new RepackReport(repack(kFixture, pack_dir()));
  }
  static void TearDownTestSuite() {
    delete report_;
    delete tmp_;
  }
  static std::string pack_dir() { return tmp_->str("pack"); }
  static std::string pack(const char* name) { return pack_dir() + "/" + name; }
  static test::TempDir* tmp_;
  static RepackReport* report_;
};
test::TempDir* ExpertPack::tmp_ = nullptr;
RepackReport* ExpertPack::report_ = nullptr;

TEST_F(ExpertPack, SucceedsOnFixture) {
  ASSERT_EQ(report_->status, kRepackOk) << all_findings(report_->findings);
  EXPECT_EQ(report_->blobs, 32u);
  ASSERT_EQ(report_->layers.size(), 4u);
  EXPECT_EQ(report_->a_log, "fixed");
  EXPECT_EQ(report_->a_log_tensors, 3u);
  EXPECT_EQ(report_->dense_tensors, 51u - 12u);
  // gguf.md §8: IQ3_S gate 56,320 B per expert, the example reason text.
  EXPECT_EQ(report_->layers[0].parts[0].expert_stride, 56320u);
  EXPECT_EQ(report_->layers[0].reasons[0], "IQ3_S gate stride 56,320 B is not a multiple of 4096");
  EXPECT_TRUE(report_->layers[0].parts[2].stride_aligned);  // IQ4_NL down: 73,728 = 18 x 4096
  for (const char* name : {"experts.bin", "dense.gguf", "manifest.json"}) EXPECT_TRUE(fs::exists(pack(name))) << name;
  for (const auto& e : fs::directory_iterator(pack_dir())) {
    if (e.path().filename() == ".ckptkit") continue;  // OUT_DIR's lock (io/output_lock.h)
    EXPECT_NE(e.path().filename().string()[0], '.') << "temporary left behind: " << e.path();
  }
  auto json = repack_report_json(*report_);
  JsonDoc doc;
  std::string error;
  EXPECT_TRUE(doc.parse(json, error)) << error;
}

// Every part equals its source slice, computed here from the source's own header.
TEST_F(ExpertPack, EveryPartIsItsSourceSlice) {
  ASSERT_EQ(report_->status, kRepackOk);
  auto src = open_gguf(kFixture);
  auto m = read_manifest(pack_dir());
  MappedFile experts;
  IoError err;
  ASSERT_TRUE(experts.open(pack("experts.bin"), err));
  EXPECT_EQ(experts.size() % 4096, 0u);
  EXPECT_EQ(u64(m->root(), "alignment"), 4096u);
  // The default names the source by its SHA-256 tree alone (no one-stream whole-file digest).
  EXPECT_TRUE(m->root()["source"]["sha256"].error()) << "source.sha256 written without --source-sha256";
  EXPECT_EQ(report_->source_sha256, "");
  EXPECT_FALSE(report_->source_tree_root.empty());
  size_t blobs = 0, parts = 0;
  std::map<std::string, int> types_seen;
  for (auto b : items(m->root(), "blobs")) {
    ++blobs;
    const uint64_t offset = u64(b, "offset"), size = u64(b, "size"), expert = u64(b, "expert");
    EXPECT_EQ(offset % 4096, 0u);
    ASSERT_LE(offset + size, experts.size());
    uint64_t in_blob = 0;
    for (auto p : items(b, "parts")) {
      ++parts;
      const auto* t = src->g.find_tensor(str(p, "tensor"));
      ASSERT_NE(t, nullptr);
      const uint64_t stride = t->nbytes / t->ne[2];
      EXPECT_EQ(u64(p, "offset"), in_blob);
      EXPECT_EQ(u64(p, "size"), stride);
      EXPECT_EQ(u64(p, "source_offset"), src->g.data_start + t->offset + expert * stride);
      EXPECT_EQ(str(p, "type"), ggml_type_name(t->type));
      auto got = experts.read_bytes(offset + in_blob, stride);
      const auto whole = src->data(*t);
      auto want = std::span<const uint8_t>(whole).subspan(static_cast<size_t>(expert * stride), static_cast<size_t>(stride));
      EXPECT_TRUE(same(got, want)) << t->name << " expert " << expert;
      Xxh3 h;
      h.update(got);
      EXPECT_EQ(str(p, "xxh3"), xxh3_hex(h.digest()));
      ++types_seen[str(p, "type")];
      in_blob += stride;
    }
    EXPECT_EQ(in_blob, size);
  }
  EXPECT_EQ(blobs, 32u);
  EXPECT_EQ(parts, 96u);
  for (const char* t : {"IQ3_S", "IQ2_S", "IQ3_XXS", "IQ4_NL", "Q4_K", "Q6_K", "MXFP4"}) EXPECT_GT(types_seen[t], 0) << t;
}

// The promise of the layout: one aligned pread per blob with O_DIRECT.
TEST_F(ExpertPack, EveryBlobReadsWithODirect) {
  ASSERT_EQ(report_->status, kRepackOk);
  const std::string path = pack("experts.bin");
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
  if (fd < 0 && errno == EINVAL) GTEST_SKIP() << "the filesystem of " << path << " rejects O_DIRECT (EINVAL at open)";
  ASSERT_GE(fd, 0) << std::strerror(errno);
  auto m = read_manifest(pack_dir());
  MappedFile buffered;
  IoError err;
  ASSERT_TRUE(buffered.open(path, err));
  for (auto b : items(m->root(), "blobs")) {
    const uint64_t offset = u64(b, "offset"), size = u64(b, "size");
    const uint64_t len = *checked_pad(size, 4096);
    void* buf = nullptr;
    ASSERT_EQ(::posix_memalign(&buf, 4096, len), 0);
    const ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(offset));
    EXPECT_EQ(n, static_cast<ssize_t>(len)) << "blob at " << offset << ": " << std::strerror(errno);
    if (n == static_cast<ssize_t>(len)) {
      EXPECT_TRUE(same({static_cast<uint8_t*>(buf), static_cast<size_t>(size)}, buffered.read_bytes(offset, size)));
    }
    std::free(buf);
  }
  ::close(fd);
}

TEST_F(ExpertPack, DenseKeepsEveryOtherTensorAndKv) {
  ASSERT_EQ(report_->status, kRepackOk);
  auto src = open_gguf(kFixture);
  auto dense = open_gguf(pack("dense.gguf"));
  EXPECT_EQ(dense->g.version, 3u);
  EXPECT_EQ(dense->g.alignment, src->g.alignment);
  EXPECT_EQ(dense->g.get_string("ckptkit.repack.experts"), "experts.bin");
  EXPECT_EQ(dense->g.get_string("ckptkit.repack.a_log"), "fixed");
  for (const auto& kv : src->g.kvs) {
    const auto* out = dense->g.find_kv(kv.key);
    ASSERT_NE(out, nullptr) << kv.key;
    uint64_t a0, a1, b0, b1;
    ASSERT_TRUE(gguf_kv_byte_range(src->file, kv, a0, a1));
    ASSERT_TRUE(gguf_kv_byte_range(dense->file, *out, b0, b1));
    EXPECT_TRUE(same(src->file.read_bytes(a0, a1 - a0), dense->file.read_bytes(b0, b1 - b0))) << kv.key;
  }
  uint64_t expected_offset = 0;
  for (const auto& t : dense->g.tensors) {
    EXPECT_EQ(t.offset, expected_offset) << t.name;
    expected_offset += *checked_pad(t.nbytes, dense->g.alignment);
    EXPECT_EQ(t.name.find("_exps."), std::string::npos) << t.name;
    if (t.name.ends_with(".A_log")) continue;
    const auto* s = src->g.find_tensor(t.name);
    ASSERT_NE(s, nullptr) << t.name;
    EXPECT_TRUE(same(dense->data(t), src->data(*s))) << t.name;
  }
  EXPECT_EQ(dense->g.file_size, dense->g.data_start + expected_offset);
  for (const auto& s : src->g.tensors) {
    if (s.name.find("_exps.") != std::string::npos || s.name.ends_with(".ssm_a")) continue;
    EXPECT_NE(dense->g.find_tensor(s.name), nullptr) << s.name;
  }
}

TEST_F(ExpertPack, ALogRecoveredWithinOneUlpOfReference) {
  ASSERT_EQ(report_->status, kRepackOk);
  auto src = open_gguf(kFixture);
  auto dense = open_gguf(pack("dense.gguf"));
  auto ref_bytes = test::read_file(kRefJson);
  JsonDoc ref;
  std::string error;
  ASSERT_TRUE(ref.parse(std::string(ref_bytes.begin(), ref_bytes.end()), error)) << error;
  int fixed = 0;
  for (int layer = 0; layer < 4; ++layer) {
    const std::string base = "blk." + std::to_string(layer);
    const auto* ssm_a = src->g.find_tensor(base + ".ssm_a");
    if (ssm_a == nullptr) continue;
    ++fixed;
    EXPECT_EQ(dense->g.find_tensor(base + ".ssm_a"), nullptr);
    const auto* a_log = dense->g.find_tensor(base + ".A_log");
    ASSERT_NE(a_log, nullptr) << base;
    ASSERT_EQ(a_log->nbytes, ssm_a->nbytes);
    auto in = src->data(*ssm_a);
    auto out = dense->data(*a_log);
    for (size_t i = 0; i < in.size() / 4; ++i) {  // log(−x) in double, rounded once
      float x, y;
      std::memcpy(&x, in.data() + 4 * i, 4);
      std::memcpy(&y, out.data() + 4 * i, 4);
      EXPECT_EQ(y, static_cast<float>(std::log(-static_cast<double>(x)))) << base << " element " << i;
    }
    simdjson::dom::element entry;
    ASSERT_FALSE(ref.root()[base + ".ssm_a#A_log"].get(entry)) << base;
    auto first16 = items(entry, "first16");
    size_t i = 0;
    for (auto v : first16) {
      float y;
      std::memcpy(&y, out.data() + 4 * i, 4);
      EXPECT_LE(ulp_distance(y, static_cast<float>(v.get_double().value())), 1) << base << " element " << i;
      ++i;
    }
    EXPECT_GT(i, 0u);
  }
  EXPECT_EQ(fixed, 3);
}

TEST(ExpertPackOptions, KeepCopiesSsmA) {
  test::TempDir tmp;
  auto r = repack(kFixture, tmp.str("out"), 4096, false);
  ASSERT_EQ(r.status, kRepackOk) << all_findings(r.findings);
  auto src = open_gguf(kFixture);
  auto dense = open_gguf(tmp.str("out/dense.gguf"));
  EXPECT_EQ(dense->g.get_string("ckptkit.repack.a_log"), "kept");
  const auto* a = dense->g.find_tensor("blk.0.ssm_a");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(same(dense->data(*a), src->data(*src->g.find_tensor("blk.0.ssm_a"))));
  EXPECT_EQ(dense->g.find_tensor("blk.0.A_log"), nullptr);
}

TEST(ExpertPackOptions, Align65536) {
  test::TempDir tmp;
  auto r = repack(kFixture, tmp.str("out"), 65536);
  ASSERT_EQ(r.status, kRepackOk) << all_findings(r.findings);
  EXPECT_EQ(fs::file_size(tmp.str("out/experts.bin")) % 65536, 0u);
  auto m = read_manifest(tmp.str("out"));
  EXPECT_EQ(u64(m->root(), "alignment"), 65536u);
  for (auto b : items(m->root(), "blobs")) EXPECT_EQ(u64(b, "offset") % 65536, 0u);
}

TEST(ExpertPackOptions, BadAlignIsUsageError) {
  test::TempDir tmp;
  for (uint64_t align : {uint64_t{0}, uint64_t{3000}, uint64_t{4097}, uint64_t{256}, uint64_t{1} << 31}) {
    auto r = repack(kFixture, tmp.str("out"), align);
    EXPECT_EQ(r.status, kRepackUsage) << align;
    EXPECT_TRUE(r.findings.has_code("REPACK_BAD_ALIGN")) << align;
  }
  EXPECT_FALSE(fs::exists(tmp.str("out")));
}

TEST(ExpertPackOptions, BadTreeChunkIsUsageError) {
  test::TempDir tmp;
  for (uint64_t chunk : {uint64_t{1}, uint64_t{4096}, uint64_t{100000}, uint64_t{1} << 31, ~uint64_t{0}}) {
    RepackOptions o;
    o.tree_chunk = chunk;
    auto r = repack_experts(kFixture, tmp.str("out"), o);
    EXPECT_EQ(r.status, kRepackUsage) << chunk;
    EXPECT_TRUE(r.findings.has_code("REPACK_BAD_TREE_CHUNK")) << chunk << "\n" << all_findings(r.findings);
  }
  EXPECT_FALSE(fs::exists(tmp.str("out")));
}

// Without --source-sha256 the tree is the source's identity: with --tree-chunk 0 the
// manifest would name no source, so that is refused before anything is written (with
// --no-source-sha256, the earlier spelling of the default, too).
TEST(ExpertPackOptions, NoSourceIdentityIsUsageError) {
  test::TempDir tmp;
  RepackOptions o;
  o.tree_chunk = 0;
  auto r = repack_experts(kFixture, tmp.str("out"), o);
  EXPECT_EQ(r.status, kRepackUsage);
  EXPECT_TRUE(r.findings.has_code("REPACK_NO_SOURCE_IDENTITY")) << all_findings(r.findings);
  EXPECT_FALSE(fs::exists(tmp.str("out")));
  for (const std::string flags : {"--tree-chunk 0", "--no-source-sha256 --tree-chunk 0"}) {
    const std::string out = tmp.str("cli" + std::to_string(flags.size()));
    auto cli = test::run_ckpt("repack-experts -q " + flags + " " + test::shell_quote(kFixture) + " " + test::shell_quote(out));
    EXPECT_EQ(cli.exit_code, 2) << flags << ": " << cli.err;
    EXPECT_NE(cli.err.find("REPACK_NO_SOURCE_IDENTITY"), std::string::npos) << cli.err;
    EXPECT_FALSE(fs::exists(out)) << flags;
  }
}

// --source-sha256 adds the whole-file digest (pack_validate_test checks it against
// OpenSSL's); the data files are the same bytes as the default's, and --no-source-sha256
// (the default's earlier spelling) gives the default's pack; the two flags together are
// a usage error.
TEST(ExpertPackOptions, SourceSha256AddsTheWholeFileDigestAndChangesNoDataFile) {
  test::TempDir tmp;
  const auto q = test::shell_quote;
  auto r = test::run_ckpt("repack-experts -q --source-sha256 " + q(kFixture) + " " + q(tmp.str("whole")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("repack-experts -q " + q(kFixture) + " " + q(tmp.str("default")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = test::run_ckpt("repack-experts -q --no-source-sha256 " + q(kFixture) + " " + q(tmp.str("no")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto whole = read_manifest(tmp.str("whole"));
  auto plain = read_manifest(tmp.str("default"));
  const std::string digest = str(whole->root()["source"].value(), "sha256");
  EXPECT_EQ(digest.size(), 64u);
  EXPECT_TRUE(plain->root()["source"]["sha256"].error());
  EXPECT_EQ(str(whole->root()["source"]["sha256_tree"].value(), "root"),
            str(plain->root()["source"]["sha256_tree"].value(), "root"));
  for (const char* name : {"experts.bin", "dense.gguf"})
    EXPECT_EQ(test::read_file(tmp.str("whole/") + name), test::read_file(tmp.str("default/") + name)) << name;
  EXPECT_EQ(test::read_file(tmp.str("no/manifest.json")), test::read_file(tmp.str("default/manifest.json")));
  r = test::run_ckpt("repack-experts -q --source-sha256 --no-source-sha256 " + q(kFixture) + " " + q(tmp.str("both")));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(tmp.str("both")));
}

// --tree-chunk 0: the manifest as written before the tree (source.sha256 only); the same
// data files as with a tree.
TEST(ExpertPackOptions, TreeChunkZeroWritesNoTree) {
  test::TempDir tmp;
  RepackOptions o;
  o.source_sha256 = true;  // the source named by its whole-file digest alone
  o.tree_chunk = 0;
  const auto r_none = repack_experts(kFixture, tmp.str("none"), o);
  ASSERT_EQ(r_none.status, kRepackOk);
  o.tree_chunk = kSha256TreeDefaultChunk;
  const auto r_tree = repack_experts(kFixture, tmp.str("tree"), o);
  ASSERT_EQ(r_tree.status, kRepackOk);
  auto none = read_manifest(tmp.str("none"));
  auto tree = read_manifest(tmp.str("tree"));
  EXPECT_TRUE(none->root()["source"]["sha256_tree"].error());
  EXPECT_FALSE(tree->root()["source"]["sha256_tree"].error());
  // The report carries the tree's root (and nothing without one).
  EXPECT_EQ(r_none.source_tree_root, "");
  EXPECT_EQ(r_tree.source_tree_root, str(tree->root()["source"]["sha256_tree"].value(), "root"));
  EXPECT_EQ(r_tree.tree_chunk, kSha256TreeDefaultChunk);
  EXPECT_EQ(repack_report_json(r_none).find("source_sha256_tree"), std::string::npos);
  EXPECT_NE(repack_report_json(r_tree).find("\"source_sha256_tree\":{\"scheme\":\"ckptkit-sha256-tree/v1\",\"chunk_size\":67108864,\"root\":\"" +
                                            r_tree.source_tree_root + "\"}"),
            std::string::npos)
      << repack_report_json(r_tree);
  EXPECT_EQ(str(none->root()["source"].value(), "sha256"), str(tree->root()["source"].value(), "sha256"));
  for (const char* name : {"experts.bin", "dense.gguf"})
    EXPECT_EQ(test::read_file(tmp.str("none/") + name), test::read_file(tmp.str("tree/") + name)) << name;
}

TEST(ExpertPackOptions, NonEmptyOutDirNeedsOverwrite) {
  test::TempDir tmp;
  ASSERT_EQ(repack(kFixture, tmp.str("out")).status, kRepackOk);
  auto again = repack(kFixture, tmp.str("out"));
  EXPECT_EQ(again.status, kRepackUsage);
  EXPECT_TRUE(again.findings.has_code("REPACK_OUT_NOT_EMPTY"));
  RepackOptions o;
  o.overwrite = true;
  EXPECT_EQ(repack_experts(kFixture, tmp.str("out"), o).status, kRepackOk);
}

// repack-experts holds OUT_DIR's lock (io/output_lock.h) from its check of OUT_DIR to its
// last rename: a run while another holds it is refused naming the holder, and writes nothing
// (before: it took no lock, so two runs both exited 0 and left a mix).
TEST(ExpertPackOptions, ALockedOutDirIsRefused) {
  test::TempDir tmp;
  const std::string out = tmp.str("out");
  FileLock held;
  std::string message;
  ASSERT_EQ(lock_output_dir(out, FileLock::Mode::exclusive, "ckpt synth", held, message), FileLock::Result::acquired);
  auto r = test::run_ckpt("repack-experts --overwrite '" + kFixture + "' '" + out + "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("REPACK_OUT_LOCKED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pid " + std::to_string(::getpid()) + " ckpt synth"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out + "/experts.bin"));
  EXPECT_FALSE(std::filesystem::exists(out + "/manifest.json"));
  held.release();
  EXPECT_EQ(test::run_ckpt("repack-experts -q '" + kFixture + "' '" + out + "'").exit_code, 0);
}

// The pack is no more readable than its input: a 0600 GGUF gives 0600 files in a 0700
// OUT_DIR (before: 0644 files in a 0755 directory).
TEST(ExpertPackOptions, OutputsAreNoMoreReadableThanTheInput) {
  test::TempDir tmp;
  const std::string in = tmp.str("private.gguf"), out = tmp.str("out");
  std::filesystem::copy_file(kFixture, in);
  std::filesystem::permissions(in, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ASSERT_EQ(repack(in, out).status, kRepackOk);
  const mode_t mask = ::umask(022);
  ::umask(mask);
  auto mode_of = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : mode_t{07777};
  };
  for (const char* name : {"experts.bin", "dense.gguf", "manifest.json"})
    EXPECT_EQ(mode_of(out + "/" + name), 0600 & ~mask) << name;
  EXPECT_EQ(mode_of(out), 0700 & ~mask);
}

TEST(ExpertPackOptions, ProgressReachesTotal) {
  test::TempDir tmp;
  RepackOptions o;
  uint64_t last_done = 0, last_total = 0;
  o.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_LE(done, total);
    last_done = done;
    last_total = total;
  };
  ASSERT_EQ(repack_experts(kFixture, tmp.str("out"), o).status, kRepackOk);
  EXPECT_GT(last_total, 0u);
  EXPECT_EQ(last_done, last_total);
}

// A copy of the fixture with blk.0.ssm_a element `index` replaced by `value`.
std::string fixture_with_ssm_a(const test::TempDir& tmp, size_t index, float value) {
  auto src = open_gguf(kFixture);
  const auto* t = src->g.find_tensor("blk.0.ssm_a");
  EXPECT_NE(t, nullptr);
  auto bytes = test::read_file(kFixture);
  std::memcpy(bytes.data() + src->g.data_start + t->offset + 4 * index, &value, 4);
  const std::string path = tmp.str("bad_ssm_a.gguf");
  test::write_file(path, bytes);
  return path;
}

struct BadValue {
  const char* what;
  size_t index;
  float value;
};

TEST(ExpertPackALog, InvalidSsmAIsRefusedNamingTensorAndElement) {
  const BadValue cases[] = {
      {"positive", 3, 0.5f},
      {"NaN", 5, std::numeric_limits<float>::quiet_NaN()},
      {"negative zero", 6, -0.0f},
      {"zero", 1, 0.0f},
      {"-Inf", 2, -std::numeric_limits<float>::infinity()},
  };
  for (const auto& c : cases) {
    test::TempDir tmp;
    const std::string in = fixture_with_ssm_a(tmp, c.index, c.value);
    auto r = repack(in, tmp.str("out"));
    EXPECT_EQ(r.status, kRepackInputError) << c.what;
    ASSERT_TRUE(r.findings.has_code("REPACK_A_LOG_VALUE")) << c.what << "\n" << all_findings(r.findings);
    const auto& f = r.findings.items().front();
    EXPECT_EQ(f.tensor, "blk.0.ssm_a") << c.what;
    EXPECT_NE(f.message.find("blk.0.ssm_a"), std::string::npos) << f.message;
    EXPECT_NE(f.message.find("element " + std::to_string(c.index)), std::string::npos) << f.message;
    EXPECT_FALSE(fs::exists(tmp.str("out"))) << c.what << ": nothing written on a refused input";
    // --a-log keep copies the values and does not care.
    EXPECT_EQ(repack(in, tmp.str("kept"), 4096, false).status, kRepackOk) << c.what;
  }
}

TEST(ExpertPackALog, SecondFixIsRefused) {
  test::TempDir tmp;
  ASSERT_EQ(repack(kFixture, tmp.str("out")).status, kRepackOk);
  // The dense output of a fixed pack: marker key and A_log tensors.
  auto r = repack(tmp.str("out/dense.gguf"), tmp.str("again"));
  EXPECT_EQ(r.status, kRepackInputError);
  EXPECT_TRUE(r.findings.has_code("REPACK_A_LOG_ALREADY_FIXED")) << all_findings(r.findings);
  // The marker key alone, on a file that still has its experts and ssm_a tensors.
  auto src = open_gguf(kFixture);
  GgufWriter w(src->g.alignment);
  std::string error;
  for (const auto& kv : src->g.kvs) ASSERT_TRUE(w.copy_kv(src->file, kv, error));
  ASSERT_TRUE(w.add_string_kv("ckptkit.repack.a_log", "fixed", error));
  for (const auto& t : src->g.tensors) ASSERT_TRUE(w.add_tensor(t.name, t.n_dims, t.ne, t.type, error));
  AtomicOutput out(tmp.str("marked.gguf"));
  ASSERT_TRUE(out.open(error));
  ASSERT_TRUE(w.begin(out, error));
  for (const auto& t : src->g.tensors) {
    ASSERT_TRUE(w.write_data(out, src->data(t), error));
    ASSERT_TRUE(w.end_tensor(out, error));
  }
  ASSERT_TRUE(w.finish(error) && out.commit(error)) << error;
  auto marked = repack(tmp.str("marked.gguf"), tmp.str("again2"));
  EXPECT_EQ(marked.status, kRepackInputError);
  ASSERT_TRUE(marked.findings.has_code("REPACK_A_LOG_ALREADY_FIXED"));
  EXPECT_NE(marked.findings.items().front().message.find("ckptkit.repack.a_log"), std::string::npos);
  EXPECT_EQ(repack(tmp.str("marked.gguf"), tmp.str("keep"), 4096, false).status, kRepackOk);
}

TEST(ExpertPackInput, MissingAndInvalidInputs) {
  test::TempDir tmp;
  auto missing = repack(tmp.str("nope.gguf"), tmp.str("out"));
  EXPECT_EQ(missing.status, kRepackIoError);
  auto bytes = test::read_file(kFixture);
  bytes.resize(bytes.size() / 2);  // tensor data past the end
  test::write_file(tmp.str("half.gguf"), bytes);
  auto half = repack(tmp.str("half.gguf"), tmp.str("out"));
  EXPECT_EQ(half.status, kRepackInputError);
  EXPECT_TRUE(half.findings.has_code("REPACK_BAD_INPUT"));
  EXPECT_FALSE(fs::exists(tmp.str("out")));
}

// ckpt repack-experts exit codes: 0 done, 1 input refused, 2 usage.
TEST(RepackCli, ExitCodes) {
  test::TempDir tmp;
  const std::string out = tmp.str("out");
  auto ok = test::run_ckpt("repack-experts --quiet '" + kFixture + "' '" + out + "'");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(fs::exists(out + "/manifest.json"));
  auto not_empty = test::run_ckpt("repack-experts '" + kFixture + "' '" + out + "'");
  EXPECT_EQ(not_empty.exit_code, 2);
  EXPECT_NE(not_empty.err.find("REPACK_OUT_NOT_EMPTY"), std::string::npos) << not_empty.err;
  auto bad_align = test::run_ckpt("repack-experts --align 1000 '" + kFixture + "' '" + tmp.str("o2") + "'");
  EXPECT_EQ(bad_align.exit_code, 2);
  auto bad_mode = test::run_ckpt("repack-experts --a-log twice '" + kFixture + "' '" + tmp.str("o3") + "'");
  EXPECT_EQ(bad_mode.exit_code, 2);
  auto second_fix = test::run_ckpt("repack-experts '" + out + "/dense.gguf' '" + tmp.str("o4") + "'");
  EXPECT_EQ(second_fix.exit_code, 1);
  EXPECT_NE(second_fix.err.find("REPACK_A_LOG_ALREADY_FIXED"), std::string::npos) << second_fix.err;
  auto json = test::run_ckpt("repack-experts --json - --align 65536 '" + kFixture + "' '" + tmp.str("o5") + "'");
  EXPECT_EQ(json.exit_code, 0) << json.err;
  JsonDoc doc;
  std::string error;
  ASSERT_TRUE(doc.parse(json.out, error)) << error << json.out;
  EXPECT_EQ(str(doc.root(), "schema"), "ckptkit/repack-report/v1");
  EXPECT_EQ(u64(doc.root()["options"].value(), "align"), 65536u);
  auto validate = test::run_ckpt("validate --deep --reference '" + kFixture + "' '" + out + "'");
  EXPECT_EQ(validate.exit_code, 0) << validate.out << validate.err;
  EXPECT_NE(validate.out.find("expert-pack"), std::string::npos) << validate.out;
}

}  // namespace
}  // namespace ckpt
