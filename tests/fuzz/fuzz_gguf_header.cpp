// libFuzzer target: one GGUF file read by read_gguf (the reader `inspect`, `validate`,
// `dump` and `repack-experts` use), then the ModelView built from it (gguf_view) and the
// KV accessors the profiles use. Limits are the reader's own (gguf.h: strings and arrays
// <= 2^30, alignment <= 2^20, names < 64 bytes). Checks: a header without error findings
// has every tensor inside the file; view tensors marked payload_ok lie inside the file.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/gguf.h"
#include "formats/loader.h"
#include "fuzz_util.h"

using namespace ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  Findings findings;
  auto g = read_gguf(bytes, "fuzz.gguf", findings);
  if (!g) {
    fuzz::fuzz_check(findings.has_errors(), "nullopt GGUF without an error finding");
    return 0;
  }
  fuzz::fuzz_check(g->file_size == size, "file_size differs from the input size");
  for (const auto& kv : g->kvs) {
    (void)kv.display();
    (void)g->find_kv(kv.key);
  }
  (void)g->get_string("general.architecture");
  (void)g->get_int("general.alignment");
  const bool clean = !findings.has_errors();
  for (const auto& t : g->tensors) {
    (void)g->find_tensor(t.name);
    if (clean && t.nbytes > 0) {
      fuzz::fuzz_check(g->data_start <= size && t.offset <= size - g->data_start &&
                           t.nbytes <= size - g->data_start - t.offset,
                       "clean GGUF with a tensor outside the file");
    }
  }
  if (clean) {
    ModelView view = gguf_view(*g, "fuzz.gguf", "fuzz.gguf");
    for (const auto& t : view.tensors) {
      if (!t.payload_ok || t.nbytes == 0) continue;
      fuzz::fuzz_check(t.offset <= size && t.nbytes <= size - t.offset, "payload_ok view tensor outside the file");
      volatile uint8_t last = bytes[t.offset + t.nbytes - 1];
      (void)last;
    }
  }
  return 0;
}
