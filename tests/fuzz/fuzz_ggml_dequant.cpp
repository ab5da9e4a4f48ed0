// libFuzzer target: ggml block dequantization on arbitrary bytes. The first byte picks a
// type among those ggml_dequantize supports (every float and quantized type of gguf.md §5);
// the rest is cut to whole blocks (at most kMaxBlocks) and dequantized as `dump` and the
// reference comparisons do, then scanned as `validate --deep` does (scan_ggml_blocks, also
// split in two chunks to check that streaming gives the same counts). The dispatched result
// (AVX2 where the CPU has it) must equal the scalar reference bit for bit.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/ggml_types.h"
#include "fuzz_util.h"
#include "numerics/ggml_block_scan.h"
#include "numerics/ggml_dequant.h"

using namespace ckpt;

namespace {

constexpr size_t kMaxBlocks = 4096;

const std::vector<int32_t>& supported_types() {
  static const std::vector<int32_t> types = [] {
    std::vector<int32_t> t;
    for (int32_t id = 0; id < kGgmlTypeCount; ++id)
      if (ggml_dequant_supported(id)) t.push_back(id);
    return t;
  }();
  return types;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& types = supported_types();
  fuzz::fuzz_check(!types.empty(), "no supported ggml type");
  const int32_t type = types[data[0] % types.size()];
  const GgmlTypeInfo* info = ggml_type_info(type);
  fuzz::fuzz_check(info && info->type_size > 0 && info->block_size > 0, "supported type without sizes");
  std::span<const uint8_t> rest(data + 1, size - 1);
  size_t blocks = std::min(rest.size() / info->type_size, kMaxBlocks);
  auto whole = rest.first(blocks * info->type_size);

  std::vector<float> out(blocks * info->block_size);
  std::string error;
  fuzz::fuzz_check(ggml_dequantize(type, whole, out, error), "ggml_dequantize refused whole blocks of a supported type");

  // Every ISA this CPU runs gives the reference's bits (NaN payloads included).
  std::vector<float> ref(out.size());
  fuzz::fuzz_check(ggml_dequantize_isa(DequantIsa::scalar, type, whole, ref, error), "the scalar path refused");
  // An input shorter than one block gives empty vectors, whose data() may be null.
  fuzz::fuzz_check(out.empty() || std::memcmp(ref.data(), out.data(), out.size() * sizeof(float)) == 0,
                   "the dispatched dequantizer differs from the scalar reference");

  // A wrong output size must be refused, not written past.
  if (blocks > 0) {
    std::vector<float> short_out(out.size() - 1);
    fuzz::fuzz_check(!ggml_dequantize(type, whole, short_out, error), "ggml_dequantize accepted a short output");
  }

  BlockScanResult all;
  scan_ggml_blocks(type, whole, 0, all);
  BlockScanResult split;
  const size_t half = (blocks / 2) * info->type_size;
  scan_ggml_blocks(type, whole.first(half), 0, split);
  scan_ggml_blocks(type, whole.subspan(half), half, split);
  fuzz::fuzz_check(all.nan == split.nan && all.inf == split.inf && all.bad_scales == split.bad_scales &&
                       all.bad_e8m0 == split.bad_e8m0 && all.first_bad_byte == split.first_bad_byte,
                   "chunked block scan differs from the one-shot scan");
  if (all.first_bad_byte) fuzz::fuzz_check(*all.first_bad_byte < whole.size(), "first_bad_byte outside the span");

  // Trailing partial block: the scan ignores it.
  BlockScanResult with_tail;
  scan_ggml_blocks(type, rest.first(std::min(rest.size(), whole.size() + info->type_size - 1)), 0, with_tail);
  fuzz::fuzz_check(with_tail.total_bad() == all.total_bad(), "a partial trailing block changed the scan");
  return 0;
}
