#include "model/tensor_values.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/checked_math.h"
#include "core/ggml_types.h"
#include "numerics/fp8.h"
#include "numerics/ggml_dequant.h"
#include "numerics/mxfp4.h"
#include "model/quant_config.h"
#include "model/pairing.h"

namespace ckpt {
namespace {

std::string hex2(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

class Dumper {
 public:
  Dumper(const LoadedModel& m, const ModelTensor& t, const DumpSink& sink, std::string& error, DumpError& why)
      : m_(m), t_(t), sink_(sink), error_(error), why_(why) {}

  bool raw();
  bool gguf_f32();
  bool safetensors_f32();

 private:
  bool fail(DumpError kind, const std::string& msg) {
    why_ = kind;
    error_ = "tensor " + t_.name + ": " + msg;
    return false;
  }
  const MappedFile* file_of(const ModelTensor& t) const;
  bool read(const ModelTensor& t, uint64_t rel, std::span<uint8_t> buf);
  bool emit(std::span<const float> values);
  bool plain_floats(int32_t ggml_type);
  bool fp8();
  bool mxfp4_expert();
  bool check_scale(const ModelTensor& s, Dtype dtype, uint64_t rows, uint64_t cols);

  const LoadedModel& m_;
  const ModelTensor& t_;
  const DumpSink& sink_;
  std::string& error_;
  DumpError& why_;
  std::vector<uint8_t> in_, scale_in_, bytes_out_;
  std::vector<float> out_;
};

const MappedFile* Dumper::file_of(const ModelTensor& t) const {
  if (m_.format == ModelFormat::gguf) return &m_.gguf_file;
  if (t.file >= m_.checkpoint.shards.size()) return nullptr;
  return &m_.checkpoint.shards[t.file].file;
}

// Reads bytes [rel, rel + buf.size()) of tensor t's payload, checked against both the
// tensor's declared size and the file (the view promises it, but this costs nothing).
bool Dumper::read(const ModelTensor& t, uint64_t rel, std::span<uint8_t> buf) {
  const MappedFile* f = file_of(t);
  if (!f || !t.payload_ok || rel > t.nbytes || buf.size() > t.nbytes - rel || t.offset > f->size() ||
      t.offset + t.nbytes > f->size())
    return fail(DumpError::bad_value, "payload of " + t.name + " lies outside its file");
  IoError io;
  if (f->read_at(t.offset + rel, buf, io)) return true;
  return fail(DumpError::io, io.path + ": " + io.message);
}

bool Dumper::emit(std::span<const float> values) {
  std::span<const uint8_t> bytes;
  if constexpr (std::endian::native == std::endian::little) {
    bytes = {reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()};
  } else {
    bytes_out_.resize(values.size_bytes());
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(values[i]);
      for (int b = 0; b < 4; ++b) bytes_out_[4 * i + b] = static_cast<uint8_t>(u >> (8 * b));
    }
    bytes = bytes_out_;
  }
  if (sink_(bytes)) return true;
  why_ = DumpError::sink;
  error_ = "writing the output failed";
  return false;
}

bool Dumper::raw() {
  in_.resize(static_cast<size_t>(std::min<uint64_t>(t_.nbytes, kDumpChunkValues * 4)));
  for (uint64_t done = 0; done < t_.nbytes;) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(in_.size(), t_.nbytes - done));
    std::span<uint8_t> chunk(in_.data(), n);
    if (!read(t_, done, chunk)) return false;
    if (!sink_(chunk)) {
      why_ = DumpError::sink;
      error_ = "writing the output failed";
      return false;
    }
    done += n;
  }
  return true;
}

uint64_t element_count(const std::vector<uint64_t>& shape, bool& ok) {
  auto n = checked_product(shape);
  ok = n.has_value();
  return n.value_or(0);
}

// "element 1234 (row 4, col 50)": the row-major index and its coordinates.
std::string element_at(uint64_t i, uint64_t j, uint64_t cols) {
  return "element " + std::to_string(i * cols + j) + " (row " + std::to_string(i) + ", col " + std::to_string(j) + ")";
}

// Whole ggml blocks per chunk, dequantized into out_ and emitted.
bool Dumper::gguf_f32() {
  const GgmlTypeInfo* info = ggml_type_info(t_.ggml_type);
  if (!info || !ggml_dequant_supported(t_.ggml_type))
    return fail(DumpError::unsupported, ggml_unsupported_message(t_.ggml_type));
  bool ok = false;
  const uint64_t n = element_count(t_.shape, ok);
  if (!ok || n % info->block_size != 0 || t_.nbytes != n / info->block_size * info->type_size)
    return fail(DumpError::bad_value, std::to_string(t_.nbytes) + " bytes do not hold " + std::to_string(n) + " " +
                                          info->name + " values");
  return plain_floats(t_.ggml_type);
}

// Dequantizes t_ as consecutive blocks of `ggml_type` (also used for safetensors F32/F16/BF16,
// whose element conversions are ggml's block-size-1 types).
bool Dumper::plain_floats(int32_t ggml_type) {
  const GgmlTypeInfo* info = ggml_type_info(ggml_type);
  const uint64_t blocks = t_.nbytes / info->type_size;
  const uint64_t per_chunk = std::max<uint64_t>(1, kDumpChunkValues / info->block_size);
  const auto first = static_cast<size_t>(std::min(blocks, per_chunk));
  in_.resize(first * info->type_size);
  out_.resize(first * info->block_size);
  for (uint64_t done = 0; done < blocks;) {
    const auto k = static_cast<size_t>(std::min(per_chunk, blocks - done));
    std::span<uint8_t> in(in_.data(), k * info->type_size);
    std::span<float> out(out_.data(), k * info->block_size);
    if (!read(t_, done * info->type_size, in)) return false;
    std::string e;
    if (!ggml_dequantize(ggml_type, in, out, e)) return fail(DumpError::unsupported, e);
    if (!emit(out)) return false;
    done += k;
  }
  return true;
}

bool Dumper::safetensors_f32() {
  if (!t_.dtype) return fail(DumpError::unsupported, "unsupported dtype " + t_.type);
  bool ok = false;
  const uint64_t n = element_count(t_.shape, ok);
  const uint64_t bits = dtype_bits(*t_.dtype);
  if (bits % 8 != 0) return fail(DumpError::unsupported, "unsupported dtype " + t_.type + " for --as f32");
  if (!ok || !t_.payload_ok || n > t_.nbytes || n * (bits / 8) != t_.nbytes)
    return fail(DumpError::bad_value, "header sizes of " + t_.type + " tensor are inconsistent");
  switch (*t_.dtype) {
    case Dtype::F32: return plain_floats(kGgmlF32);
    case Dtype::F16: return plain_floats(kGgmlF16);
    case Dtype::BF16: return plain_floats(kGgmlBF16);
    case Dtype::F8_E4M3: return fp8();
    case Dtype::I8:
      if (is_mxfp4_expert_name(t_.name)) return mxfp4_expert();
      break;
    default: break;
  }
  return fail(DumpError::unsupported, "unsupported dtype " + t_.type +
                                          " for --as f32 (F32, F16, BF16, F8_E4M3 with its scale and MXFP4 "
                                          "experts are; --as raw writes any tensor's bytes)");
}

bool Dumper::check_scale(const ModelTensor& s, Dtype dtype, uint64_t rows, uint64_t cols) {
  const uint64_t esz = dtype_bits(dtype) / 8;
  if (s.dtype != dtype || s.shape.size() != 2 || s.shape[0] != rows || s.shape[1] != cols || !s.payload_ok ||
      s.nbytes != rows * cols * esz)
    return fail(DumpError::unsupported, "its scale " + s.name + " is " + s.type + " with a shape other than [" +
                                            std::to_string(rows) + ", " + std::to_string(cols) + "] of " +
                                            dtype_name(dtype));
  return true;
}

// The scale is found, typed and shaped by the same pairing rules as validate and convert
// (model/pairing.h under the detected quantization profile); the values are the f32 products
// fp8_scaled_f32(code, scale) of numerics/fp8.h, which convert rounds once to BF16.
bool Dumper::fp8() {
  if (t_.shape.size() != 2) return fail(DumpError::unsupported, "an F8_E4M3 weight must be 2-D");
  PairingOptions po;
  po.allow_bare_fp8_names = true;
  if (const JsonDoc* cfg = m_.checkpoint.config.get()) {
    const WeightBlockSize wbs = read_weight_block_size(cfg->root());
    QuantDetectError error;
    const bool known = detect_quant_scheme(m_.checkpoint, po.scheme, error);
    if (wbs.status == WeightBlockSize::invalid && !(known && quant_scheme_ignores_null_block(po.scheme, wbs)))
      return fail(DumpError::bad_value, "config.json: " + weight_block_size_problem(wbs));
    if (!known) return fail(DumpError::unsupported, error.file + ": " + error.message);
    if (po.scheme.block_given) {
      po.block_rows = po.scheme.block_rows;
      po.block_cols = po.scheme.block_cols;
    } else if (wbs.status == WeightBlockSize::valid) {
      po.block_rows = wbs.rows;
      po.block_cols = wbs.cols;
    }
  }
  std::string problem, code;
  const std::optional<Fp8Pair> pair = pair_fp8_weight(m_.view, po, t_, problem, &code);
  if (!pair) {
    if (code == "FP8_UNPAIRED")
      return fail(DumpError::unsupported, "F8_E4M3 weight without a scale (.scale or .weight_scale_inv): " + problem);
    return fail(DumpError::unsupported, problem);
  }
  const ModelTensor* s = &m_.view.tensors[pair->scale];
  const Fp8Grid g{t_.shape[0], t_.shape[1], pair->block_rows, pair->block_cols};
  const uint64_t scols = fp8_scale_cols(g);
  if (g.rows == 0 || g.cols == 0) return true;
  const uint64_t esz = dtype_bits(pair->scale_dtype) / 8;
  if (!s->payload_ok || s->nbytes != fp8_scale_rows(g) * scols * esz)
    return fail(DumpError::bad_value, "scale " + s->name + " holds " + std::to_string(s->nbytes) + " bytes, not a " +
                                          std::to_string(fp8_scale_rows(g)) + " x " + std::to_string(scols) + " grid");
  std::vector<float> multipliers;
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, kDumpChunkValues / g.cols);
  for (uint64_t r0 = 0; r0 < g.rows; r0 += rows_per_chunk) {
    const uint64_t r1 = std::min(g.rows, r0 + rows_per_chunk);
    const uint64_t sr0 = r0 / g.block_rows, sr1 = (r1 - 1) / g.block_rows + 1;
    in_.resize((r1 - r0) * g.cols);
    scale_in_.resize((sr1 - sr0) * scols * esz);
    out_.resize(in_.size());
    if (!read(t_, r0 * g.cols, in_) || !read(*s, sr0 * scols * esz, scale_in_)) return false;
    if (pair->f32_scale) scale_grid_to_f32(pair->scale_dtype, scale_in_, multipliers);
    for (uint64_t i = r0; i < r1; ++i) {
      for (uint64_t j = 0; j < g.cols; ++j) {
        const uint64_t k = (i - r0) * g.cols + j, si = (i / g.block_rows - sr0) * scols + j / g.block_cols;
        const uint8_t code8 = in_[k];
        if (e4m3_is_nan(code8))
          return fail(DumpError::bad_value, element_at(i, j, g.cols) + " is the E4M3 NaN code " + hex2(code8));
        float scale;
        if (pair->f32_scale) {
          scale = multipliers[si];
          if (!std::isfinite(scale))
            return fail(DumpError::bad_value, element_at(i, j, g.cols) + ": its scale in " + s->name + " is not finite");
        } else {
          if (e8m0_is_nan(scale_in_[si]))
            return fail(DumpError::bad_value,
                        element_at(i, j, g.cols) + ": its scale in " + s->name + " is the E8M0 NaN code 0xFF");
          scale = e8m0_to_float(scale_in_[si]);
        }
        // E8M0: e4m3 × 2^k is exact in fp32 (at most 4 significant bits, ≥ 2^−136).
        // Multipliers: one binary32 multiply, as DeepSeek-V3's kernel does before its BF16 rounding.
        out_[k] = fp8_scaled_f32(code8, scale);
        // Finite inputs whose product is beyond f32: refused, as convert refuses it for BF16.
        if (!std::isfinite(out_[k]))
          return fail(DumpError::bad_value, element_at(i, j, g.cols) + " times its scale in " + s->name +
                                                " is beyond f32's largest finite value; refusing to write inf");
      }
    }
    if (!emit(out_)) return false;
  }
  return true;
}

bool Dumper::mxfp4_expert() {
  if (t_.shape.size() != 2) return fail(DumpError::unsupported, "an MXFP4 expert weight must be 2-D [out, in/2]");
  const uint64_t rows = t_.shape[0], cols = 2 * t_.shape[1];
  const std::string scale_name = t_.name.substr(0, t_.name.size() - 7) + ".scale";
  const ModelTensor* s = m_.view.find(scale_name);
  if (!s) return fail(DumpError::unsupported, "MXFP4 expert weight without its scale " + scale_name);
  if (cols % 32 != 0) return fail(DumpError::unsupported, "MXFP4 rows of " + std::to_string(cols) + " values are not whole 32-blocks");
  if (!check_scale(*s, Dtype::F8_E8M0, rows, cols / 32)) return false;
  if (rows == 0 || cols == 0) return true;
  const uint64_t rows_per_chunk = std::max<uint64_t>(1, kDumpChunkValues / cols);
  for (uint64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    const uint64_t r1 = std::min(rows, r0 + rows_per_chunk);
    in_.resize((r1 - r0) * cols / 2);
    scale_in_.resize((r1 - r0) * cols / 32);
    out_.resize((r1 - r0) * cols);
    if (!read(t_, r0 * cols / 2, in_) || !read(*s, r0 * cols / 32, scale_in_)) return false;
    for (size_t k = 0; k < out_.size(); ++k) {
      const uint8_t e = scale_in_[k / 32];
      if (e8m0_is_nan(e)) {
        return fail(DumpError::bad_value, element_at(r0 + k / cols, k % cols, cols) + ": its scale in " + s->name +
                                              " is the E8M0 NaN code 0xFF");
      }
      const uint8_t byte = in_[k / 2];
      const uint8_t code = k % 2 == 0 ? byte & 0xF : byte >> 4;  // low nibble first
      out_[k] = e2m1_to_float(code) * e8m0_to_float(e);  // ≤ 2 significant bits × 2^k: exact
      if (!std::isfinite(out_[k]))  // 6 × 2^127: refused, as convert refuses it (for BF16)
        return fail(DumpError::bad_value, element_at(r0 + k / cols, k % cols, cols) + " times its scale in " + s->name +
                                              " is beyond f32's largest finite value; refusing to write inf");
    }
    if (!emit(out_)) return false;
  }
  return true;
}

}  // namespace

bool dump_tensor(const LoadedModel& m, const std::string& name, DumpAs as, const DumpSink& sink, std::string& error,
                 DumpError* why) {
  DumpError local = DumpError::none;
  DumpError& kind = why ? *why : local;
  kind = DumpError::none;
  const ModelTensor* t = m.view.find(name);
  if (!t) {
    kind = DumpError::not_found;
    error = "no tensor named '" + name + "' in " + m.path;
    return false;
  }
  Dumper d(m, *t, sink, error, kind);
  if (as == DumpAs::raw) return d.raw();
  return m.format == ModelFormat::gguf ? d.gguf_f32() : d.safetensors_f32();
}

}  // namespace ckpt
