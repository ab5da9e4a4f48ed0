// ckpt_bench_remap: the CPU work of an INT8-shift expert check on the calling thread, per
// ISA in the same process on the same bytes (bench/remap.sh pins it to one core): the remap
// of one expert (remap_expert_mxfp4 without and with RemapStats, _shift2, _channel_scale) in
// MB/s of MXFP4 input (weight + scale bytes), and the CPU decode of its slabs
// (decode_int8_shift) in MB/s of slab input. The expert is bench/make_data.py's w13: two parts
// of 2048 rows, k = 2048, random codes, block scales 121 .. 121 + SPAN (make_data's default 3:
// every block lossless at headroom 3; 5 folds about a third). Never a test.
//
// Usage: ckpt_bench_remap [REPEATS] [SPAN]   (defaults 7, 3)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <time.h>
#include <vector>

#include "numerics/ggml_dequant.h"
#include "numerics/int8_gemm_ref.h"
#include "numerics/int8_shift.h"

namespace {

using namespace ckpt;

// The calling thread's CPU time (the host's 2 cores are shared: time spent descheduled is
// not the loop's).
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

template <class Fn>
double best_seconds(int repeats, Fn&& fn) {
  fn();  // warm-up (and first touch of the outputs)
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = thread_seconds();
    fn();
    best = std::min(best, thread_seconds() - t0);
  }
  return best;
}

void check(bool failed, const char* what) {
  if (failed) {
    std::fprintf(stderr, "ckpt_bench_remap: %s failed\n", what);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const int span = argc > 2 ? std::clamp(std::atoi(argv[2]), 0, 100) : 3;
  constexpr uint64_t kPartRows = 2048, kK = 2048;
  const RemapParams p{2 * kPartRows, kK, 3, RemapRounding::half_away};
  std::mt19937_64 rng(20261201);
  std::vector<uint8_t> weight(p.rows * p.k / 2), scale(p.rows * p.k / 32);
  for (auto& b : weight) b = static_cast<uint8_t>(rng());
  for (auto& s : scale) s = static_cast<uint8_t>(121 + rng() % uint64_t(span + 1));
  const uint64_t half_w = kPartRows * kK / 2, half_s = kPartRows * kK / 32;
  const std::vector<RemapPart> parts = {
      RemapPart{std::span<const uint8_t>(weight).first(half_w), std::span<const uint8_t>(scale).first(half_s), kPartRows},
      RemapPart{std::span<const uint8_t>(weight).subspan(half_w), std::span<const uint8_t>(scale).subspan(half_s),
                kPartRows}};
  std::vector<uint8_t> mx(remap_mxfp4_bytes(p)), sh(remap_shift2_bytes(p)), cs(remap_channel_scale_bytes(p));
  std::vector<int8_t> q(p.rows * p.k);
  const double in_mb = double(weight.size() + scale.size()) / 1e6, slab_mb = double(mx.size() + sh.size()) / 1e6;

  std::printf("== INT8-shift remap and decode, one expert [%llu, %llu] (%.1f MB MXFP4), scale span %d, one thread, "
              "best thread CPU time of %d; MB/s of input\n",
              static_cast<unsigned long long>(p.rows), static_cast<unsigned long long>(p.k), in_mb, span, repeats);
  std::printf("%-28s %10s %10s %8s\n", "step", "scalar", "avx2", "speedup");
  const DequantIsa best = ggml_dequant_best_isa();
  struct Step {
    const char* name;
    double mb;
    double seconds[2];
  };
  std::vector<Step> steps = {{"remap mxfp4", in_mb, {}},          {"remap mxfp4 + stats", in_mb, {}},
                             {"remap shift2", in_mb, {}},         {"remap channel_scale", in_mb, {}},
                             {"verify remap (all three)", in_mb, {}}, {"decode_int8_shift", slab_mb, {}}};
  for (int i = 0; i < 2; ++i) {
    const DequantIsa isa = i == 0 ? DequantIsa::scalar : best;
    RemapStats stats;
    steps[0].seconds[i] = best_seconds(repeats, [&] { check(bool(remap_expert_mxfp4_isa(isa, parts, p, mx, nullptr)), "mxfp4"); });
    steps[1].seconds[i] = best_seconds(repeats, [&] { check(bool(remap_expert_mxfp4_isa(isa, parts, p, mx, &stats)), "stats"); });
    steps[2].seconds[i] = best_seconds(repeats, [&] { check(bool(remap_expert_shift2_isa(isa, parts, p, sh)), "shift2"); });
    steps[3].seconds[i] =
        best_seconds(repeats, [&] { check(bool(remap_expert_channel_scale_isa(isa, parts, p, cs)), "channel_scale"); });
    steps[4].seconds[i] = best_seconds(repeats, [&] {
      check(remap_expert_mxfp4_isa(isa, parts, p, mx, nullptr) || remap_expert_shift2_isa(isa, parts, p, sh) ||
                remap_expert_channel_scale_isa(isa, parts, p, cs),
            "remap");
    });
    steps[5].seconds[i] = best_seconds(repeats, [&] { check(!decode_int8_shift_isa(isa, mx, sh, p, q), "decode"); });
  }
  for (const Step& s : steps)
    std::printf("%-28s %10.0f %10.0f %7.2fx\n", s.name, s.mb / s.seconds[0], s.mb / s.seconds[1],
                s.seconds[0] / s.seconds[1]);
  if (best < DequantIsa::avx2) std::printf("(this CPU has no AVX2: both columns ran the scalar loops)\n");
  return 0;
}
