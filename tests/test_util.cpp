#include "test_util.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>

#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/ggml_types.h"
#include "numerics/ggml_dequant.h"

namespace fs = std::filesystem;

namespace ckpt::test {

namespace {
// A run with an unknown CKPT_DEQUANT_ISA fails before any test: it would check the scalar
// reference where the run asked for something else (the CLIs refuse it likewise, exit 2).
class DequantIsaEnvironment : public ::testing::Environment {
  void SetUp() override {
    DequantIsa isa;
    std::string error;
    if (!ggml_dequant_isa_from_environment(isa, error)) GTEST_FAIL() << error;
  }
};
[[maybe_unused]] ::testing::Environment* const dequant_isa_environment =
    ::testing::AddGlobalTestEnvironment(new DequantIsaEnvironment);
}  // namespace

std::unique_ptr<LoadedModel> load_model_checked(const std::string& path) {
  auto model = std::make_unique<LoadedModel>();
  Findings findings;
  EXPECT_TRUE(load_model(path, StReadOptions{}, *model, findings)) << path;
  for (const auto& f : findings.items())
    EXPECT_NE(f.severity, Severity::error) << path << ": " << f.code << " " << f.message;
  return model;
}

std::string describe(const Findings& findings) {
  std::string s;
  for (const auto& f : findings.items()) s += f.code + " " + f.file + " [" + f.tensor + "] " + f.message + "\n";
  return s;
}

std::vector<uint8_t> tensor_bytes(const LoadedModel& model, const ModelTensor& tensor) {
  MappedFile f;
  IoError err;
  EXPECT_TRUE(f.open(model.view.file_paths[tensor.file], err)) << err.message;
  auto s = f.read_bytes(tensor.offset, tensor.nbytes);
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::vector<uint8_t> tensor_bytes(const LoadedModel& model, const std::string& name) {
  const ModelTensor* t = model.view.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? tensor_bytes(model, *t) : std::vector<uint8_t>{};
}

// CKPT_TEST_FIXTURES / CKPT_TEST_BIN_DIR override the build-time paths (tests/fixtures of
// the source tree, the build directory), so the suite runs from a copied build tree.
std::string fixture(const std::string& rel) {
  const char* dir = std::getenv("CKPT_TEST_FIXTURES");
  return std::string(dir && *dir ? dir : CKPT_FIXTURES_DIR) + "/" + rel;
}

std::string tool_binary(const std::string& name) {
  const char* dir = std::getenv("CKPT_TEST_BIN_DIR");
  if (dir && *dir) return std::string(dir) + "/" + name;
  return (std::filesystem::path(CKPT_BINARY).parent_path() / name).string();
}

TempDir::TempDir() {
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto p = fs::temp_directory_path() / ("ckpt-test-" + std::to_string(rd()));
    std::error_code ec;
    if (fs::create_directory(p, ec)) {
      path_ = p;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<uint8_t> bytes(fs::file_size(path));  // one allocation of the exact size
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void dump_fuzz_seed(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes) {
  const char* dir = std::getenv("CKPT_FUZZ_SEED_DIR");
  if (!dir || !*dir) return;
  std::string file;
  for (char c : name) file += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  const std::filesystem::path folder = std::filesystem::path(dir) / target;
  std::filesystem::create_directories(folder);
  write_file((folder / file).string(), bytes);
}

void write_text(const std::string& path, const std::string& text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

void copy_tree(const std::string& from, const std::string& to) {
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  if (!fs::is_directory(to)) {
    fs::permissions(to, fs::perms::owner_write, fs::perm_options::add);
    return;
  }
  for (auto& e : fs::recursive_directory_iterator(to))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  fs::permissions(to, fs::perms::owner_write, fs::perm_options::add);
}

std::vector<uint8_t> make_safetensors(const std::string& header_json, const std::vector<uint8_t>& payload,
                                      bool pad) {
  std::string h = header_json;
  if (pad)
    while (h.size() % 8 != 0) h += ' ';
  // Sized up front and filled in place: `out.insert(out.end(), ...)` on the 8-byte vector
  // trips GCC 12's -Warray-bounds false positive at -O3 ("offset 8 is out of the bounds [0, 8]").
  std::vector<uint8_t> out(8 + h.size());
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(h.begin(), h.end(), out.begin() + 8);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

static std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string read_text(const std::string& path) { return slurp(path); }

RunResult run_ckpt(const std::string& args) { return run_ckpt_env("", args); }

RunResult run_ckpt_env(const std::string& env, const std::string& args, const std::string& shell_prefix) {
  return run_tool("ckpt", env, args, shell_prefix);
}

RunResult run_tool(const std::string& name, const std::string& env, const std::string& args,
                   const std::string& shell_prefix) {
  TempDir tmp;
  std::string out = tmp.str("out"), err = tmp.str("err");
  std::string cmd = shell_prefix + env + (env.empty() ? "" : " ") + tool_binary(name) + " " + args + " >" + out +
                    " 2>" + err + " </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

const std::vector<GgmlAvx2Type>& ggml_avx2_types() {
  static const std::vector<GgmlAvx2Type> all = {
      {kGgmlF32, {}},         {kGgmlF16, {}},          {kGgmlBF16, {}},        {kGgmlQ4_0, {0}},
      {kGgmlQ4_1, {0, 2}},    {kGgmlQ5_0, {0}},        {kGgmlQ5_1, {0, 2}},    {kGgmlQ8_0, {0}},
      {kGgmlQ8_1, {0, 2}},    {kGgmlQ2_K, {80, 82}},   {kGgmlQ3_K, {108}},     {kGgmlQ4_K, {0, 2}},
      {kGgmlQ5_K, {0, 2}},    {kGgmlQ6_K, {208}},      {kGgmlQ8_K, {}},        {kGgmlIQ2_XXS, {0}},
      {kGgmlIQ2_XS, {0}},     {kGgmlIQ2_S, {0}},       {kGgmlIQ3_XXS, {0}},    {kGgmlIQ3_S, {0}},
      {kGgmlIQ4_NL, {0}},     {kGgmlIQ4_XS, {0}},      {kGgmlMXFP4, {}},
  };
  return all;
}

void PrintTo(const GgmlAvx2Type& t, std::ostream* os) { *os << ggml_type_info(t.type)->name; }

std::vector<GgmlAvx2Type> ggml_avx2_scaled_types() {
  std::vector<GgmlAvx2Type> v;
  for (const auto& c : ggml_avx2_types())
    if (!c.f16_fields.empty()) v.push_back(c);
  return v;
}

void for_every_f16_scale(size_t type_size, size_t field, const std::function<std::vector<uint8_t>()>& make_blocks,
                         const std::function<void(const std::vector<uint8_t>& blocks, uint32_t chunk)>& check) {
  for (uint32_t chunk = 0; chunk < 65536; chunk += 4096) {
    std::vector<uint8_t> blocks = make_blocks();
    for (uint32_t h = chunk; h < chunk + 4096; ++h) {
      uint8_t* b = blocks.data() + (h - chunk) * type_size;
      b[field] = static_cast<uint8_t>(h);
      b[field + 1] = static_cast<uint8_t>(h >> 8);
    }
    check(blocks, chunk);
  }
}

bool cpu_has_avx2_f16c() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
#else
  return false;
#endif
}

bool cpu_has_avx512f() {
#if defined(__x86_64__)
  return cpu_has_avx2_f16c() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

}  // namespace ckpt::test
