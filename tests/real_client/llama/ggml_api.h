// ggml's C API as the real-client checks call it: the few entry points of ggml.h and
// gguf.h (llama.cpp as shipped in @node-llama-cpp/linux-x64@3.22.1) found by dlopen/dlsym
// in the package's libggml-base.so, so ckptkit has no header or link-time dependency on
// llama.cpp. The declarations copy ggml.h / gguf.h of that release (C ABI; enums are int).
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace ckpt_llama {

struct ggml_context;
struct gguf_context;

// gguf.h: no_alloc true reads the header only (what llama.cpp's model loader does); false
// with ctx set reads the whole data section too (llama-gguf-hash, the "full-read" mode).
struct gguf_init_params {
  bool no_alloc;
  ggml_context** ctx;
};

using ggml_to_float_t = void (*)(const void* x, float* y, int64_t k);
using ggml_from_float_t = void (*)(const float* x, void* y, int64_t k);
// ggml.h struct ggml_type_traits, field for field.
struct ggml_type_traits {
  const char* type_name;
  int64_t blck_size;
  int64_t blck_size_interleave;
  size_t type_size;
  bool is_quantized;
  ggml_to_float_t to_float;
  ggml_from_float_t from_float_ref;
};
using ggml_log_callback = void (*)(int level, const char* text, void* user_data);
inline constexpr int kGgmlLogLevelError = 4;  // GGML_LOG_LEVEL_ERROR

struct GgmlApi {
  gguf_context* (*gguf_init_from_file)(const char*, gguf_init_params) = nullptr;
  void (*gguf_free)(gguf_context*) = nullptr;
  int64_t (*gguf_get_n_tensors)(const gguf_context*) = nullptr;
  size_t (*gguf_get_data_offset)(const gguf_context*) = nullptr;
  size_t (*gguf_get_tensor_offset)(const gguf_context*, int64_t) = nullptr;
  const char* (*gguf_get_tensor_name)(const gguf_context*, int64_t) = nullptr;
  int (*gguf_get_tensor_type)(const gguf_context*, int64_t) = nullptr;
  size_t (*gguf_get_tensor_size)(const gguf_context*, int64_t) = nullptr;
  void (*ggml_free)(ggml_context*) = nullptr;
  bool (*ggml_validate_row_data)(int type, const void* data, size_t nbytes) = nullptr;
  const ggml_type_traits* (*ggml_get_type_traits)(int type) = nullptr;
  // ggml-quants.h: Q8_K has no to_float in the type traits but ggml exports its dequantizer.
  void (*dequantize_row_q8_K)(const void* x, float* y, int64_t k) = nullptr;
  void (*ggml_log_set)(ggml_log_callback, void*) = nullptr;

  // Opens `lib` (the package's libggml-base.so) and resolves every entry point.
  bool load(const std::string& lib, std::string& error) {
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      error = std::string("dlopen: ") + dlerror();
      return false;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr) {
        error += std::string(error.empty() ? "" : ", ") + "missing symbol " + name;
        ok = false;
      }
    };
    sym(gguf_init_from_file, "gguf_init_from_file");
    sym(gguf_free, "gguf_free");
    sym(gguf_get_n_tensors, "gguf_get_n_tensors");
    sym(gguf_get_data_offset, "gguf_get_data_offset");
    sym(gguf_get_tensor_offset, "gguf_get_tensor_offset");
    sym(gguf_get_tensor_name, "gguf_get_tensor_name");
    sym(gguf_get_tensor_type, "gguf_get_tensor_type");
    sym(gguf_get_tensor_size, "gguf_get_tensor_size");
    sym(ggml_free, "ggml_free");
    sym(ggml_validate_row_data, "ggml_validate_row_data");
    sym(ggml_get_type_traits, "ggml_get_type_traits");
    sym(dequantize_row_q8_K, "dequantize_row_q8_K");
    sym(ggml_log_set, "ggml_log_set");
    return ok;
  }
};

}  // namespace ckpt_llama
