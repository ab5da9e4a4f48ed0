// Element-wise decoding of a tensor's stored bytes to f32, by the tensor's own type
// alone (no scale pairing): the definition behind `ckpt hash --dequant` and the values
// `ckpt diff` prints. safetensors: BOOL, U8, I8, I16, U16, I32, U32, I64, U64 (the
// integer rounded to nearest f32), F16, BF16, F32, F64 (rounded to nearest f32),
// F8_E4M3 (0x7F/0xFF NaN), F8_E5M2, F8_E8M0 (2^(b-127); 0xFF NaN). GGUF: every type
// ggml_dequantize handles (bit-identical to ggml's to_float) plus I8/I16/I32/I64/F64.
// Anything else (F4, F6_*, *FNUZ, C64, unsupported ggml types) has no f32 form.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "formats/model_view.h"

namespace ckpt {

struct ValueCodec {
  bool ok = false;
  std::string why_not;        // when !ok: "dtype F4 has no element-wise f32 decoding"
  uint64_t unit_bytes = 1;    // bytes of the smallest decodable unit (an element or a ggml block)
  uint64_t unit_values = 1;   // values in one unit
  int32_t ggml_type = -1;     // GGUF type, or -1
  int kind = 0;               // internal: which element decoder
};

ValueCodec value_codec(const ModelTensor& t);

// Decodes whole units: bytes.size() must be a multiple of unit_bytes and
// out.size() == bytes.size() / unit_bytes * unit_values. Returns false with `error` set otherwise.
bool decode_values(const ValueCodec& c, std::span<const uint8_t> bytes, std::span<float> out, std::string& error);

}  // namespace ckpt
