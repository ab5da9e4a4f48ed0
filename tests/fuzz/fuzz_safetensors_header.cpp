// libFuzzer target: one safetensors file (8-byte length, JSON header, data section) read
// by read_safetensors_header, the function every command opens shards with, in strict
// and in compat mode with the CLI's limits (StReadOptions defaults: header <= 100,000,000
// bytes, <= 1,000,000 tensors, names <= 4096 bytes). Checks the reader's promises: every
// tensor with sizes_ok has end - begin == nbytes; with layout_ok every tensor lies inside
// the file; a header with no errors is layout_ok and valid JSON for a full parser.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "formats/json.h"
#include "formats/safetensors.h"
#include "fuzz_util.h"

using namespace ckpt;

namespace {

void check_one(std::span<const uint8_t> bytes, StMode mode) {
  StReadOptions options;
  options.mode = mode;
  Findings findings;
  auto h = read_safetensors_header(bytes, "fuzz.safetensors", options, findings);
  if (!h) {
    fuzz::fuzz_check(findings.has_errors(), "nullopt header without an error finding");
    return;
  }
  fuzz::fuzz_check(h->file_size == bytes.size(), "file_size differs from the input size");
  fuzz::fuzz_check(h->data_start == 8 + h->header_len && h->data_start <= bytes.size(), "data_start out of the file");
  for (const auto& t : h->tensors) {
    if (t.sizes_ok) fuzz::fuzz_check(t.end >= t.begin && t.end - t.begin == t.nbytes, "sizes_ok tensor with a wrong span");
    if (h->layout_ok) {
      fuzz::fuzz_check(t.end <= bytes.size() - h->data_start, "layout_ok tensor past the end of the file");
      // Touch the first and last payload byte as a reader would: ASan catches a lie.
      if (t.nbytes > 0) {
        volatile uint8_t first = bytes[h->data_start + t.begin];
        volatile uint8_t last = bytes[h->data_start + t.end - 1];
        (void)first;
        (void)last;
      }
    }
  }
  if (!findings.has_errors()) {
    fuzz::fuzz_check(h->layout_ok, "no error findings but layout not ok");
    // Accepted without an error: a full JSON parser must read the header too. Syntax only:
    // compat mode warns about a tensor named twice (ST_DUPLICATE_TENSOR), which JsonDoc,
    // the reader of JSON read for meaning, refuses by design.
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, static_cast<size_t>(h->header_len));
    fuzz::fuzz_check(parser.parse(text.data(), text.size(), true).get(root) == simdjson::SUCCESS,
                     "header accepted without errors but it is not valid JSON");
  }
  (void)h->payload_bytes();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  check_one(bytes, StMode::strict);
  check_one(bytes, StMode::compat);
  return 0;
}
