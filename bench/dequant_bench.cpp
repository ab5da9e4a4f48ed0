// ckpt_bench_dequant: ggml dequantization throughput on the calling thread, in MB/s of
// quantized input, for the scalar reference and the dispatched ISA in the same process on
// the same bytes (bench/dequant.sh pins it to one core and prints the table). The blocks
// are random with realistic scale fields (normal f16 scales of 2^-10..2^-5, E8M0 bytes
// 118..133, normal F16/BF16/F32 elements), so no NaN/denormal path is timed.
//
// A second table times the CPU side of `ckpt-gpu verify`'s digest on the dispatched ISA, in
// steps of at most 4M elements as verify makes them: (a) dequantize only, into a 64K-element
// piece (the decode alone, its output in cache); (b) dequantize into the piece and digest it,
// as GgufVerifier::cpu_digest did before the fused path; (c) ggml_dequant_digest, fused;
// and (c)/(b).
//
// A third mode times convert's CPU side (issue 33: the CPU must not be the limit on a fast
// disk): FP8 E4M3 with E8M0 128x128 block scales -> BF16 (dequant_fp8_rows_e8m0) and MXFP4
// -> BF16 (dequant_mxfp4_rows), in convert's units (1024 rows of 4096 columns: 4 MiB of FP8,
// 2 MiB of MXFP4 in, 8 MiB of BF16 out), every unit's output written to /dev/null; on one
// thread and on every core (one thread per core taking units from a shared counter), in
// GB/s of BF16 output.
//
// Usage: ckpt_bench_dequant [MB_PER_TYPE] [REPEATS] [TYPE...]   (defaults 8, 5, all)
//        ckpt_bench_dequant --convert [GB_OUT] [THREADS]        (defaults 4, all cores)
#include <algorithm>
#include <atomic>
#include <fcntl.h>
#include <thread>
#include <unistd.h>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "numerics/f32_digest.h"
#include "numerics/fp8.h"
#include "numerics/mxfp4.h"
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

const char* isa_name(DequantIsa isa) {
  return isa == DequantIsa::avx512 ? "avx512" : isa == DequantIsa::avx2 ? "avx2" : "scalar";
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

[[noreturn]] void fail(const std::string& error) {
  std::fprintf(stderr, "%s\n", error.c_str());
  std::exit(1);
}

// The digest benchmark's three ways over `in`, in verify's steps (whole blocks, <= 4M elements).
// fused_avx2: the fused digest on the AVX2 loops, beside (c) where the CPU runs AVX-512.
enum class DigestWay { dequant_only, dequant_then_digest, fused, fused_avx2 };

F32Digest digest_all(DigestWay way, int32_t type, const std::vector<uint8_t>& in, std::vector<float>& piece,
                     const DigestWeights& w) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  const size_t step = (uint64_t{1} << 22) / info->block_size * info->type_size;
  const size_t piece_bytes = piece.size() / info->block_size * info->type_size;
  const std::span<const uint8_t> all(in);
  F32Digest total;
  std::string error;
  for (size_t off = 0; off < in.size(); off += step) {
    const auto s = all.subspan(off, std::min(step, in.size() - off));
    F32Digest d;
    if (way == DigestWay::fused) {
      if (!ggml_dequant_digest(type, s, 0, w, d, error)) fail(error);
    } else if (way == DigestWay::fused_avx2) {
      if (!ggml_dequant_digest_isa(DequantIsa::avx2, type, s, 0, w, d, error)) fail(error);
    } else {
      for (size_t p = 0, index = 0; p < s.size(); p += piece_bytes) {
        const size_t nb = std::min(piece_bytes, s.size() - p), elems = nb / info->type_size * info->block_size;
        const std::span<float> y(piece.data(), elems);
        if (!ggml_dequantize(type, s.subspan(p, nb), y, error)) fail(error);
        if (way == DigestWay::dequant_then_digest) d += f32_digest(y, index, w);
        else d.a += std::bit_cast<uint32_t>(y[0]);  // keeps the decode from being dropped
        index += elems;
      }
    }
    total += d;
  }
  return total;
}

// Thread CPU seconds (the machine may be shared: time this thread was descheduled is not counted).
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Best thread seconds of each way over `repeats` rounds, the ways interleaved in every round
// (a noisy neighbour slows all three alike); the digests of (b) and (c) checked equal.
void best_digest_seconds(int32_t type, const std::vector<uint8_t>& in, std::vector<float>& piece,
                         const DigestWeights& w, int repeats, double (&best)[4]) {
  const DigestWay ways[4] = {DigestWay::dequant_only, DigestWay::dequant_then_digest, DigestWay::fused,
                             DigestWay::fused_avx2};
  F32Digest result[4];
  for (int k = 0; k < 4; ++k) result[k] = digest_all(ways[k], type, in, piece, w), best[k] = 1e30;  // warm-up
  if (!(result[1] == result[2]) || !(result[1] == result[3]))
    fail(std::string(ggml_type_info(type)->name) + ": the fused digest differs");
  for (int r = 0; r < repeats; ++r) {
    for (int k = 0; k < 4; ++k) {
      const double t0 = thread_seconds();
      const F32Digest d = digest_all(ways[k], type, in, piece, w);
      best[k] = std::min(best[k], thread_seconds() - t0);
      if (!(d == result[k])) fail("the digest changed between runs");
    }
  }
}

// --- convert's CPU side --------------------------------------------------------------
constexpr uint64_t kUnitRows = 1024, kCols = 4096;
constexpr uint64_t kUnitOut = kUnitRows * kCols * 2;  // BF16 bytes of one unit

// One unit of FP8 rows with its whole grid: `units` units make the tensor the grid covers.
struct Fp8Input {
  std::vector<uint8_t> rows, grid;
  Fp8Grid g;
};
Fp8Input make_fp8(uint64_t units, std::mt19937_64& rng) {
  Fp8Input in;
  in.g = Fp8Grid{units * kUnitRows, kCols, 128, 128};
  in.rows.resize(kUnitRows * kCols);
  for (auto& b : in.rows) b = static_cast<uint8_t>(rng() & 0x7E);  // no NaN code (0x7F/0xFF), sign clear
  in.grid.resize(fp8_scale_rows(in.g) * fp8_scale_cols(in.g));
  for (auto& b : in.grid) b = static_cast<uint8_t>(118 + rng() % 16);
  return in;
}
struct Mxfp4Input {
  std::vector<uint8_t> packed, scales;
};
Mxfp4Input make_mxfp4(std::mt19937_64& rng) {
  Mxfp4Input in;
  in.packed.resize(kUnitRows * kCols / 2);
  for (auto& b : in.packed) b = static_cast<uint8_t>(rng());
  in.scales.resize(kUnitRows * kCols / 32);
  for (auto& b : in.scales) b = static_cast<uint8_t>(118 + rng() % 16);
  return in;
}

// Runs `units` units of `kernel(unit, out)` on `threads` threads, each unit's output written
// to /dev/null; returns wall seconds.
template <class Kernel>
double run_units(uint64_t units, unsigned threads, const Kernel& kernel) {
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      std::vector<uint8_t> out(kUnitOut);
      for (uint64_t u; (u = next++) < units;) {
        if (!kernel(u, out) || ::write(null_fd, out.data(), out.size()) != static_cast<ssize_t>(out.size()))
          failed = true;
      }
      ::close(null_fd);
    });
  for (auto& t : pool) t.join();
  if (failed) fail("a conversion unit failed");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int convert_mode(double gb_out, unsigned threads) {
  const uint64_t units = std::max<uint64_t>(threads, static_cast<uint64_t>(gb_out * 1e9 / kUnitOut));
  std::mt19937_64 rng(1);
  const Fp8Input fp8 = make_fp8(units, rng);
  const Mxfp4Input mx = make_mxfp4(rng);
  auto fp8_unit = [&](uint64_t u, std::vector<uint8_t>& out) {
    return !dequant_fp8_rows_e8m0(fp8.rows, u * kUnitRows, fp8.g, fp8.grid, out);
  };
  auto mxfp4_unit = [&](uint64_t u, std::vector<uint8_t>& out) {
    return !dequant_mxfp4_rows(mx.packed, mx.scales, kCols, u * kUnitRows, out);
  };
  std::printf("== convert's CPU side, GB/s of BF16 output written to /dev/null (%.2f GB per run, units of "
              "%llu x %llu, best of 3)\n",
              static_cast<double>(units * kUnitOut) / 1e9, static_cast<unsigned long long>(kUnitRows),
              static_cast<unsigned long long>(kCols));
  std::printf("%-28s %12s %16s %9s\n", "kernel", "1 core GB/s", (std::to_string(threads) + " threads GB/s").c_str(),
              "scaling");
  auto row = [&](const char* name, const auto& kernel) {
    double one = 1e30, all = 1e30;
    for (int r = 0; r < 3; ++r) {
      one = std::min(one, run_units(std::max<uint64_t>(1, units / threads), 1, kernel) * threads);
      all = std::min(all, run_units(units, threads, kernel));
    }
    const double bytes = static_cast<double>(units * kUnitOut);
    std::printf("%-28s %12.2f %16.2f %8.1fx\n", name, bytes / one / 1e9, bytes / all / 1e9, one / all);
  };
  row("FP8 E4M3 (E8M0) -> BF16", fp8_unit);
  row("MXFP4 -> BF16", mxfp4_unit);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--convert") {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    return convert_mode(argc > 2 ? std::atof(argv[2]) : 4.0,
                        argc > 3 ? static_cast<unsigned>(std::max(1, std::atoi(argv[3]))) : cores);
  }
  const double mb = argc > 1 ? std::atof(argv[1]) : 8.0;
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  std::vector<std::string> only(argv + std::min(argc, 3), argv + argc);
  const DequantIsa isa = ggml_dequant_isa();  // CKPT_DEQUANT_ISA=avx2 on an AVX-512 CPU times the AVX2 loops
  const bool fast = isa >= DequantIsa::avx2;
  const std::string fast_column = fast ? std::string(isa_name(isa)) + " MB/s" : "dispatch MB/s";
  std::printf("%-8s %8s %13s %15s %8s\n", "type", "MB in", "scalar MB/s", fast_column.c_str(), "speedup");
  std::mt19937_64 rng(1);
  for (const BenchType& t : kTypes) {
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    if (!only.empty() && std::find(only.begin(), only.end(), info->name) == only.end()) continue;
    const std::vector<uint8_t> in = make_input(t, static_cast<size_t>(mb * 1e6), rng);
    std::vector<float> out(in.size() / info->type_size * info->block_size);
    const double ts = best_seconds(DequantIsa::scalar, t.type, in, out, repeats);
    const double tf = best_seconds(isa, t.type, in, out, repeats);
    const double in_mb = static_cast<double>(in.size()) / 1e6;
    std::printf("%-8s %8.2f %13.0f %15.0f %7.1fx\n", info->name, in_mb, in_mb / ts, in_mb / tf, ts / tf);
  }
  std::printf("\n== verify's CPU digest (%s), MB/s of input: (a) dequantize only, into a 64K piece; (b) "
              "dequantize + digest per piece (before); (c) fused ggml_dequant_digest; (d) (c) on the AVX2 loops; best "
              "thread CPU time, interleaved\n",
              isa_name(isa));
  std::printf("%-8s %8s %10s %10s %10s %10s %8s %8s\n", "type", "MB in", "(a)", "(b)", "(c)", "(d)", "(c)/(b)",
              "(c)/(d)");
  const DigestWeights w(digest_fresh_key());
  std::vector<float> piece(65536);
  rng.seed(1);  // the same inputs as above
  for (const BenchType& t : kTypes) {
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    if (!only.empty() && std::find(only.begin(), only.end(), info->name) == only.end()) continue;
    const std::vector<uint8_t> in = make_input(t, static_cast<size_t>(mb * 1e6), rng);
    double best[4];
    best_digest_seconds(t.type, in, piece, w, 2 * repeats, best);
    const double ta = best[0], tb = best[1], tc = best[2], td = best[3];
    const double in_mb = static_cast<double>(in.size()) / 1e6;
    std::printf("%-8s %8.2f %10.0f %10.0f %10.0f %10.0f %7.2fx %7.2fx\n", info->name, in_mb, in_mb / ta, in_mb / tb,
                in_mb / tc, in_mb / td, tb / tc, td / tc);
  }
  return 0;
}
