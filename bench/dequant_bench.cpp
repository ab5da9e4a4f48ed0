// ckpt_bench_dequant: ggml dequantization throughput on the calling thread, in MB/s of
// quantized input, for the scalar reference and the dispatched ISA in the same process on
// the same bytes (bench/dequant.sh pins it to one core and prints the table). The blocks
// are random with realistic scale fields (normal f16 scales of 2^-10..2^-5, E8M0 bytes
// 118..133, normal F16/BF16/F32 elements), so no NaN/denormal path is timed.
//
// Usage: ckpt_bench_dequant [MB_PER_TYPE] [REPEATS] [TYPE...]   (defaults 8, 5, all)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "numerics/ggml_dequant.h"

namespace {

using namespace ckpt;

struct BenchType {
  int32_t type;
  std::vector<size_t> f16_fields;
};

const std::vector<BenchType> kTypes = {
    {kGgmlF16, {}},       {kGgmlBF16, {}},      {kGgmlQ4_0, {0}},      {kGgmlQ4_1, {0, 2}},  {kGgmlQ5_0, {0}},
    {kGgmlQ5_1, {0, 2}},  {kGgmlQ8_0, {0}},     {kGgmlQ8_1, {0, 2}},   {kGgmlQ2_K, {80, 82}}, {kGgmlQ3_K, {108}},
    {kGgmlQ4_K, {0, 2}},  {kGgmlQ5_K, {0, 2}},  {kGgmlQ6_K, {208}},    {kGgmlQ8_K, {}},      {kGgmlIQ2_XXS, {0}},
    {kGgmlIQ2_XS, {0}},   {kGgmlIQ2_S, {0}},    {kGgmlIQ3_XXS, {0}},   {kGgmlIQ3_S, {0}},    {kGgmlIQ4_NL, {0}},
    {kGgmlIQ4_XS, {0}},   {kGgmlMXFP4, {}},
};

// A high byte with exponent bits in [lo, hi] and a random sign.
uint8_t high_byte(std::mt19937_64& rng, int lo, int hi) {
  const int e = lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
  return static_cast<uint8_t>(e | (rng() & 1 ? 0x80 : 0));
}

std::vector<uint8_t> make_input(const BenchType& t, size_t bytes, std::mt19937_64& rng) {
  const GgmlTypeInfo* info = ggml_type_info(t.type);
  const size_t ts = info->type_size, blocks = std::max<size_t>(1, bytes / ts);
  std::vector<uint8_t> in(blocks * ts);
  for (auto& b : in) b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < blocks; ++i) {
    uint8_t* b = in.data() + i * ts;
    for (size_t off : t.f16_fields) b[off + 1] = high_byte(rng, 0x14, 0x17);  // 2^-10..2^-5
    if (t.type == kGgmlF16) b[1] = high_byte(rng, 0x30, 0x3B);
    if (t.type == kGgmlBF16) b[1] = high_byte(rng, 0x3C, 0x40);
    if (t.type == kGgmlQ8_K) b[3] = high_byte(rng, 0x3C, 0x40);
    if (t.type == kGgmlMXFP4) b[0] = static_cast<uint8_t>(118 + rng() % 16);
  }
  return in;
}

// Best seconds of `repeats` runs of one dequantization of `in`.
double best_seconds(DequantIsa isa, int32_t type, const std::vector<uint8_t>& in, std::vector<float>& out,
                    int repeats) {
  std::string error;
  if (!ggml_dequantize_isa(isa, type, in, out, error)) {  // warm-up (and first-touch of out)
    std::fprintf(stderr, "%s\n", error.c_str());
    std::exit(1);
  }
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ggml_dequantize_isa(isa, type, in, out, error);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const double mb = argc > 1 ? std::atof(argv[1]) : 8.0;
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  std::vector<std::string> only(argv + std::min(argc, 3), argv + argc);
  const bool fast = ggml_dequant_best_isa() == DequantIsa::avx2;
  std::printf("%-8s %8s %13s %15s %8s\n", "type", "MB in", "scalar MB/s", fast ? "avx2 MB/s" : "dispatch MB/s",
              "speedup");
  std::mt19937_64 rng(1);
  for (const BenchType& t : kTypes) {
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    if (!only.empty() && std::find(only.begin(), only.end(), info->name) == only.end()) continue;
    const std::vector<uint8_t> in = make_input(t, static_cast<size_t>(mb * 1e6), rng);
    std::vector<float> out(in.size() / info->type_size * info->block_size);
    const double ts = best_seconds(DequantIsa::scalar, t.type, in, out, repeats);
    const double tf = best_seconds(ggml_dequant_best_isa(), t.type, in, out, repeats);
    const double in_mb = static_cast<double>(in.size()) / 1e6;
    std::printf("%-8s %8.2f %13.0f %15.0f %7.1fx\n", info->name, in_mb, in_mb / ts, in_mb / tf, ts / tf);
  }
  return 0;
}
