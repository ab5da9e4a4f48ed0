// Shared helpers for the test suite: fixture paths, scratch directories,
// byte-level file surgery, and running the ckpt binary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "formats/loader.h"

// CKPT_TEST_ASAN is 1 in an AddressSanitizer build: GCC defines __SANITIZE_ADDRESS__,
// clang 14 only answers __has_feature(address_sanitizer) (make asan builds with clang).
#if defined(__SANITIZE_ADDRESS__)
#define CKPT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKPT_TEST_ASAN 1
#endif
#endif
#ifndef CKPT_TEST_ASAN
#define CKPT_TEST_ASAN 0
#endif

namespace ckpt::test {

// Every finding on one line ("CODE file [tensor] message"), for assertion messages.
std::string describe(const Findings& findings);
// A tensor's payload bytes, read through the model's own file.
std::vector<uint8_t> tensor_bytes(const LoadedModel& model, const ModelTensor& tensor);
// The same by name; fails the test (and returns nothing) when the tensor is absent.
std::vector<uint8_t> tensor_bytes(const LoadedModel& model, const std::string& name);
// 'path' for a shell command line (paths in tests hold no single quotes).
inline std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

// Opens a checkpoint directory, .safetensors or .gguf file with the library's own loader
// (the same code the CLI runs) and fails the current test when it reports errors.
std::unique_ptr<LoadedModel> load_model_checked(const std::string& path);

// tests/fixtures/<rel> (read-only: copy before damaging).
std::string fixture(const std::string& rel);

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str(const std::string& rel = "") const { return rel.empty() ? path_.string() : (path_ / rel).string(); }

 private:
  std::filesystem::path path_;
};

std::vector<uint8_t> read_file(const std::string& path);
std::string read_text(const std::string& path);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
void write_text(const std::string& path, const std::string& text);
// Copies a file or a whole directory (recursively); the copy is writable.
void copy_tree(const std::string& from, const std::string& to);

// Builds a safetensors file from a header JSON text and a payload (header padded with
// spaces to a multiple of 8 unless pad == false).
std::vector<uint8_t> make_safetensors(const std::string& header_json, const std::vector<uint8_t>& payload,
                                      bool pad = true);

// Seeds for the fuzz corpus (tests/fuzz/make_corpus.sh): when CKPT_FUZZ_SEED_DIR is set,
// writes `bytes` to $CKPT_FUZZ_SEED_DIR/<target>/<name with non-alphanumerics as '_'>;
// otherwise does nothing. Lets the corruption tables double as the fuzzers' seed corpus.
void dump_fuzz_seed(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes);

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs the built ckpt binary with `args` (shell-quoted by the caller where needed).
RunResult run_ckpt(const std::string& args);
// Same, with environment assignments ("A=1 B=2") and a shell prefix ("ulimit -f 100; ").
// A run killed by signal N reports exit code 128 + N, as a shell does.
RunResult run_ckpt_env(const std::string& env, const std::string& args, const std::string& shell_prefix = "");
// The path of a tool built beside ckpt ("ckpt", "ckpt-gpu").
std::string tool_binary(const std::string& name);
// Runs that tool like run_ckpt_env.
RunResult run_tool(const std::string& name, const std::string& env, const std::string& args,
                   const std::string& shell_prefix = "");

// The ggml types with an AVX2 dequantization loop (numerics/ggml_dequant_avx2.cpp) and the
// byte offsets of their f16 scale fields, for the tests that set every scale value.
struct GgmlAvx2Type {
  int32_t type;
  std::vector<size_t> f16_fields;
};
const std::vector<GgmlAvx2Type>& ggml_avx2_types();
// Those of them with f16 scale fields (for_every_f16_scale's cases).
std::vector<GgmlAvx2Type> ggml_avx2_scaled_types();
// Every binary16 value (zeros, denormals, normals, ±Inf, quiet and signalling NaNs) written
// into the f16 scale field at byte `field` of `blocks` (4096 blocks of `type_size` bytes,
// the rest left as they are): one call of `check` per 4096 values, the first being `chunk`.
// `make_blocks` gives each call's 4096 blocks.
void for_every_f16_scale(size_t type_size, size_t field, const std::function<std::vector<uint8_t>()>& make_blocks,
                         const std::function<void(const std::vector<uint8_t>& blocks, uint32_t chunk)>& check);
void PrintTo(const GgmlAvx2Type& t, std::ostream* os);  // the type's name
// True when this CPU runs AVX2 and F16C (what the AVX2 loops need), asked of CPUID here, not
// of the library under test.
bool cpu_has_avx2_f16c();
// True when it also runs AVX-512F (what the AVX-512 loops need; their tests skip elsewhere).
bool cpu_has_avx512f();

}  // namespace ckpt::test
