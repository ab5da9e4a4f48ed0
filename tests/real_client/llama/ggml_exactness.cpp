// Exactness against ggml itself: for every ggml type ckptkit decodes, ggml's own to_float
// (from the npm package's libggml-base.so, by dlopen) is the whole-tensor reference, and
// ckptkit's scalar, AVX2 and AVX-512 paths (ggml_dequantize_isa) and the GPU kernels'
// arithmetic on the host (make_emulated_backend, for the kernels' types) must equal it bit
// for bit on random blocks, on every byte value at every byte position of a block, and on
// edge blocks (zero, all ones, and each scale field set to zero, ±0, the smallest and
// largest subnormal, the largest finite, ±Inf and quiet, signalling and negative NaNs).
// Where ggml has no to_float the reference is named: F32 (ggml uses the bits as they are),
// Q8_1 (no dequantizer in ggml; its value is Q8_0's d·q, so ggml's Q8_0 to_float on the
// block without its s field) and Q8_K (ggml-quants.h's exported dequantize_row_q8_K).
// Usage: ckpt_llama_exactness LIBGGML_BASE_SO [--seed N]. Exit 0 all equal, 1 a
// mismatch (the first one per path is printed), 2 usage or a missing reference.
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "ggml_api.h"
#include "numerics/ggml_dequant.h"
#include "verify/backend.h"

namespace {

using namespace ckpt;
using ckpt_llama::GgmlApi;

struct Rng {  // xorshift64*: the corpus is the same on every run
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
};

// Where a block keeps its scale(s): byte offset and encoding (ggml-common.h's structs).
enum class ScaleKind { f16, f32, e8m0 };
struct ScaleField {
  uint32_t offset;
  ScaleKind kind;
};
std::vector<ScaleField> scale_fields(int32_t type) {
  switch (type) {
    case kGgmlQ4_1: case kGgmlQ5_1: case kGgmlQ8_1: case kGgmlQ4_K: case kGgmlQ5_K:
      return {{0, ScaleKind::f16}, {2, ScaleKind::f16}};  // d, m (dmin; Q8_1's s)
    case kGgmlQ4_0: case kGgmlQ5_0: case kGgmlQ8_0: case kGgmlIQ2_XXS: case kGgmlIQ2_XS: case kGgmlIQ2_S:
    case kGgmlIQ3_XXS: case kGgmlIQ3_S: case kGgmlIQ4_NL: case kGgmlIQ4_XS:
      return {{0, ScaleKind::f16}};
    case kGgmlQ2_K: return {{80, ScaleKind::f16}, {82, ScaleKind::f16}};
    case kGgmlQ3_K: return {{108, ScaleKind::f16}};
    case kGgmlQ6_K: return {{208, ScaleKind::f16}};
    case kGgmlQ8_K: return {{0, ScaleKind::f32}};
    case kGgmlMXFP4: return {{0, ScaleKind::e8m0}};
    default: return {};
  }
}

const std::vector<uint32_t>& edge_values(ScaleKind kind) {
  static const std::vector<uint32_t> f16 = {0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x0400, 0x3C00, 0x7BFF, 0xFBFF,
                                            0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE01, 0x7FFF, 0xFFFF};
  static const std::vector<uint32_t> f32 = {0x00000000, 0x80000000, 0x00000001, 0x007FFFFF, 0x80000001,
                                            0x3F800000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
                                            0x7F800001, 0xFFC00001, 0x7FFFFFFF};
  static std::vector<uint32_t> e8m0;
  if (e8m0.empty())
    for (uint32_t e = 0; e < 256; ++e) e8m0.push_back(e);
  return kind == ScaleKind::f16 ? f16 : kind == ScaleKind::f32 ? f32 : e8m0;
}

void put_scale(uint8_t* block, const ScaleField& f, uint32_t v) {
  const uint32_t n = f.kind == ScaleKind::f16 ? 2 : f.kind == ScaleKind::f32 ? 4 : 1;
  for (uint32_t i = 0; i < n; ++i) block[f.offset + i] = static_cast<uint8_t>(v >> (8 * i));
}

// The corpus of one type: edge blocks, then 256 sweep blocks (block k's byte j is
// (j + k) mod 256, and (j·7 + k) mod 256 in a second pass), then `random` random blocks.
std::vector<uint8_t> make_blocks(int32_t type, uint32_t size, uint64_t random, Rng& rng) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> b(size);
  auto push = [&] { out.insert(out.end(), b.begin(), b.end()); };
  auto fill_random = [&] {
    for (auto& x : b) x = static_cast<uint8_t>(rng.next() >> 56);
  };
  std::fill(b.begin(), b.end(), 0x00);
  push();
  std::fill(b.begin(), b.end(), 0xFF);
  push();
  const auto fields = scale_fields(type);
  for (size_t which = 0; which <= fields.size(); ++which) {  // each field alone, then all of them
    for (uint32_t v : edge_values(fields.empty() ? ScaleKind::f16 : fields[0].kind)) {
      if (fields.empty()) break;
      for (int body = 0; body < 3; ++body) {
        if (body == 0) std::fill(b.begin(), b.end(), 0x00);
        if (body == 1) std::fill(b.begin(), b.end(), 0xFF);
        if (body == 2) fill_random();
        for (size_t f = 0; f < fields.size(); ++f)
          if (which == fields.size() || which == f) put_scale(b.data(), fields[f], v);
        push();
      }
    }
  }
  for (uint32_t mul : {1u, 7u})
    for (uint32_t k = 0; k < 256; ++k) {
      for (uint32_t j = 0; j < size; ++j) b[j] = static_cast<uint8_t>(j * mul + k);
      push();
    }
  for (uint64_t i = 0; i < random; ++i) {
    fill_random();
    push();
  }
  return out;
}

// ggml's values for the blocks; false (with `what` saying why) when ggml has no reference.
bool ggml_reference(const GgmlApi& api, int32_t type, const std::vector<uint8_t>& blocks, std::vector<float>& y,
                    std::string& what) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  if (type == kGgmlF32) {
    std::memcpy(y.data(), blocks.data(), blocks.size());
    what = "ggml uses F32 bits as they are (no to_float)";
    return true;
  }
  if (type == kGgmlQ8_K) {
    api.dequantize_row_q8_K(blocks.data(), y.data(), static_cast<int64_t>(y.size()));
    what = "ggml dequantize_row_q8_K";
    return true;
  }
  if (type == kGgmlQ8_1) {  // {d, s, qs[32]} -> {d, qs[32]}
    const uint64_t n = blocks.size() / 36;
    std::vector<uint8_t> q8_0(n * 34);
    for (uint64_t i = 0; i < n; ++i) {
      std::memcpy(&q8_0[i * 34], &blocks[i * 36], 2);
      std::memcpy(&q8_0[i * 34 + 2], &blocks[i * 36 + 4], 32);
    }
    api.ggml_get_type_traits(kGgmlQ8_0)->to_float(q8_0.data(), y.data(), static_cast<int64_t>(y.size()));
    what = "ggml Q8_0 to_float of the block without s (ggml has no Q8_1 to_float)";
    return true;
  }
  const auto* traits = api.ggml_get_type_traits(type);
  if (traits == nullptr || traits->to_float == nullptr) {
    what = std::string("ggml has no to_float for ") + info->name;
    return false;
  }
  if (traits->blck_size != info->block_size || traits->type_size != info->type_size) {
    what = std::string("ggml's block of ") + info->name + " differs from ckptkit's";
    return false;
  }
  traits->to_float(blocks.data(), y.data(), static_cast<int64_t>(y.size()));
  what = std::string("ggml to_float (") + traits->type_name + ")";
  return true;
}

// Index of the first element whose bits differ, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return static_cast<int64_t>(i);
  return -1;
}

int check_type(const GgmlApi& api, DecodeBackend& emulate, int32_t type, Rng& rng) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  const uint64_t random = info->block_size == 1 ? 65536 * 4 : 8192;
  std::vector<uint8_t> blocks = make_blocks(type, info->type_size, random, rng);
  if (type == kGgmlF16 || type == kGgmlBF16)  // every one of the 65536 codes
    for (uint32_t c = 0; c < 65536; ++c) {
      blocks.push_back(static_cast<uint8_t>(c));
      blocks.push_back(static_cast<uint8_t>(c >> 8));
    }
  const uint64_t n_blocks = blocks.size() / info->type_size, n = n_blocks * info->block_size;
  std::vector<float> ref(n);
  std::string what;
  if (!ggml_reference(api, type, blocks, ref, what)) {
    std::printf("%-8s NO REFERENCE: %s\n", info->name, what.c_str());
    return 1;
  }
  struct Path {
    const char* name;
    DequantIsa isa;
  };
  int failures = 0;
  std::string equal;
  auto compare = [&](const char* name, const std::vector<float>& y) {
    const int64_t i = first_difference(ref, y);
    if (i < 0) {
      equal += std::string(" == ") + name;
      return;
    }
    ++failures;
    const uint64_t block = static_cast<uint64_t>(i) / info->block_size;
    std::printf("%-8s MISMATCH %s: element %" PRId64 " (block %" PRIu64 ", bytes", info->name, name, i, block);
    for (uint32_t j = 0; j < info->type_size && j < 40; ++j) std::printf(" %02x", blocks[block * info->type_size + j]);
    std::printf("%s): ggml 0x%08x, ckptkit 0x%08x\n", info->type_size > 40 ? " ..." : "",
                std::bit_cast<uint32_t>(ref[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(y[static_cast<size_t>(i)]));
  };
  for (const Path& p : {Path{"scalar", DequantIsa::scalar}, Path{"avx2", DequantIsa::avx2},
                        Path{"avx512", DequantIsa::avx512}}) {
    if (p.isa != DequantIsa::scalar && ggml_dequant_best_isa() < p.isa) {
      equal += std::string(" (") + p.name + ": not on this CPU)";
      continue;
    }
    std::vector<float> y(n);
    std::string error;
    if (!ggml_dequantize_isa(p.isa, type, blocks, y, error)) {
      std::printf("%-8s ERROR %s: %s\n", info->name, p.name, error.c_str());
      ++failures;
      continue;
    }
    compare(p.name, y);
  }
  std::vector<float> y(n);
  std::string error;
  if (emulate.ggml_to_f32(type, blocks, y, error)) compare("GPU emulation", y);
  std::printf("%-8s %7" PRIu64 " blocks, %8" PRIu64 " elements: %s%s%s\n", info->name, n_blocks, n, what.c_str(),
              equal.c_str(), failures ? "  FAIL" : ", bit for bit");
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--seed")) {
    std::fprintf(stderr, "usage: %s LIBGGML_BASE_SO [--seed N]\n", argv[0]);
    return 2;
  }
  GgmlApi api;
  std::string error;
  if (!api.load(argv[1], error)) {
    std::fprintf(stderr, "%s: %s\n", argv[1], error.c_str());
    return 2;
  }
  Rng rng{argc == 4 ? std::stoull(argv[3]) : 0x6c6c616d61ULL};
  auto emulate = make_emulated_backend();
  int types = 0, failed = 0;
  for (int32_t type = 0; type < kGgmlTypeCount; ++type) {
    if (!ggml_dequant_supported(type)) continue;
    ++types;
    if (check_type(api, *emulate, type, rng) != 0) ++failed;
  }
  std::printf("%d of %d types ckptkit decodes equal ggml's values bit for bit on every path (best ISA here: %s)\n",
              types - failed, types,
              ggml_dequant_best_isa() == DequantIsa::avx512 ? "avx512" : ggml_dequant_best_isa() == DequantIsa::avx2 ? "avx2" : "scalar");
  return failed == 0 ? 0 : 1;
}
