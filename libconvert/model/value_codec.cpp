#include "model/value_codec.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/ggml_types.h"
#include "numerics/fp8.h"
#include "numerics/ggml_dequant.h"

namespace ckpt {
namespace {

enum Kind : int {
  kNone, kBool, kU8, kI8, kI16, kU16, kI32, kU32, kI64, kU64, kF16, kBF16, kF32, kF64, kE4M3, kE5M2, kE8M0, kGgml
};

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (as the whole project)
  return v;
}

ValueCodec element(Kind k, uint64_t bytes) {
  ValueCodec c;
  c.ok = true;
  c.kind = k;
  c.unit_bytes = bytes;
  return c;
}

ValueCodec codec_for_dtype(Dtype d) {
  switch (d) {
    case Dtype::BOOL: return element(kBool, 1);
    case Dtype::U8: return element(kU8, 1);
    case Dtype::I8: return element(kI8, 1);
    case Dtype::I16: return element(kI16, 2);
    case Dtype::U16: return element(kU16, 2);
    case Dtype::I32: return element(kI32, 4);
    case Dtype::U32: return element(kU32, 4);
    case Dtype::I64: return element(kI64, 8);
    case Dtype::U64: return element(kU64, 8);
    case Dtype::F16: return element(kF16, 2);
    case Dtype::BF16: return element(kBF16, 2);
    case Dtype::F32: return element(kF32, 4);
    case Dtype::F64: return element(kF64, 8);
    case Dtype::F8_E4M3: return element(kE4M3, 1);
    case Dtype::F8_E5M2: return element(kE5M2, 1);
    case Dtype::F8_E8M0: return element(kE8M0, 1);
    default: break;
  }
  ValueCodec c;
  c.why_not = std::string("dtype ") + dtype_name(d) + " has no element-wise f32 decoding";
  c.unit_bytes = std::max<uint32_t>(1, dtype_bits(d) / 8);
  return c;
}

ValueCodec codec_for_ggml(int32_t type) {
  switch (type) {
    case kGgmlI8: return element(kI8, 1);
    case kGgmlI16: return element(kI16, 2);
    case kGgmlI32: return element(kI32, 4);
    case kGgmlI64: return element(kI64, 8);
    case kGgmlF64: return element(kF64, 8);
    default: break;
  }
  const GgmlTypeInfo* info = ggml_type_info(type);
  ValueCodec c;
  if (!info || info->type_size == 0 || info->block_size == 0 || !ggml_dequant_supported(type)) {
    c.why_not = ggml_unsupported_message(type);
    if (info && info->type_size) c.unit_bytes = info->type_size;
    return c;
  }
  c.ok = true;
  c.kind = kGgml;
  c.ggml_type = type;
  c.unit_bytes = info->type_size;
  c.unit_values = info->block_size;
  return c;
}

}  // namespace

ValueCodec value_codec(const ModelTensor& t) {
  if (t.ggml_type >= 0) return codec_for_ggml(t.ggml_type);
  if (t.dtype) return codec_for_dtype(*t.dtype);
  ValueCodec c;
  c.why_not = "type " + t.type + " is unknown";
  return c;
}

bool decode_values(const ValueCodec& c, std::span<const uint8_t> in, std::span<float> out, std::string& error) {
  if (!c.ok || c.unit_bytes == 0 || in.size() % c.unit_bytes != 0 ||
      out.size() != in.size() / c.unit_bytes * c.unit_values) {
    error = c.ok ? "decode: byte count " + std::to_string(in.size()) + " is not a whole number of units" : c.why_not;
    return false;
  }
  if (c.kind == kGgml) return ggml_dequantize(c.ggml_type, in, out, error);
  const uint8_t* p = in.data();
  const size_t n = out.size();
  switch (c.kind) {
    case kBool: for (size_t i = 0; i < n; ++i) out[i] = p[i] ? 1.0f : 0.0f; break;
    case kU8: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]); break;
    case kI8: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(p[i])); break;
    case kI16: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<int16_t>(p + 2 * i)); break;
    case kU16: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<uint16_t>(p + 2 * i)); break;
    case kI32: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<int32_t>(p + 4 * i)); break;
    case kU32: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<uint32_t>(p + 4 * i)); break;
    case kI64: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<int64_t>(p + 8 * i)); break;
    case kU64: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<uint64_t>(p + 8 * i)); break;
    case kF16: for (size_t i = 0; i < n; ++i) out[i] = ggml_fp16_to_f32(load<uint16_t>(p + 2 * i)); break;
    case kBF16: for (size_t i = 0; i < n; ++i) out[i] = ggml_bf16_to_f32(load<uint16_t>(p + 2 * i)); break;
    case kF32: for (size_t i = 0; i < n; ++i) out[i] = load<float>(p + 4 * i); break;
    case kF64: for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(p + 8 * i)); break;
    case kE4M3: for (size_t i = 0; i < n; ++i) out[i] = e4m3_to_float(p[i]); break;
    // E5M2 is the high byte of an IEEE binary16.
    case kE5M2: for (size_t i = 0; i < n; ++i) out[i] = ggml_fp16_to_f32(static_cast<uint16_t>(p[i] << 8)); break;
    case kE8M0: for (size_t i = 0; i < n; ++i) out[i] = e8m0_to_float(p[i]); break;
    default: error = "decode: no decoder"; return false;
  }
  return true;
}

}  // namespace ckpt
