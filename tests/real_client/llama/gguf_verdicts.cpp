// llama.cpp's own verdicts on GGUF files, for the differential test (check_llama.py):
//   parser     gguf_init_from_file(no_alloc = true, ctx): the header as llama.cpp's model
//              loader reads it (its first call), every rule of ggml's gguf.cpp;
//   full_read  gguf_init_from_file(no_alloc = false, ctx): the whole data section read into
//              memory, as llama-gguf-hash does (refuses a data section shorter than the sum
//              of the tensors' padded sizes: the last tensor's padding included);
//   data       ggml_validate_row_data over every tensor's bytes (what the loader runs with
//              check_tensors: NaN / Inf in f16 scales and float data), after the loader's
//              bounds rule (data_offset + offset + nbytes within the file).
// One JSON line per file on stdout. Full read runs only when the parser accepted and the
// data section fits in the file (ggml allocates the declared size before reading: a hostile
// size would abort the process, which is not a verdict).
#include <cstdio>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "ggml_api.h"

namespace {

using namespace ckpt_llama;

std::vector<std::string> g_errors;  // ggml's error log lines since the last clear

void collect_log(int level, const char* text, void*) {
  if (level != kGgmlLogLevelError || text == nullptr) return;
  std::string line(text);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  if (!line.empty()) g_errors.push_back(line);
}

// The first error line ggml logged (the specific one; later lines say "failed to read ...").
std::string first_error(const char* fallback) {
  std::string e = g_errors.empty() ? std::string(fallback) : g_errors.front();
  g_errors.clear();
  return e;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

uint64_t file_size(const char* path) {
  struct stat st {};
  return stat(path, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

struct Verdicts {
  std::string parser = "ok", full_read = "ok", data = "ok";
};

// The loader's bounds rule, then ggml_validate_row_data on each tensor in the file.
// `all_read`: every tensor lay in the file and was read (whatever the row check said).
std::string check_data(const GgmlApi& api, const gguf_context* ctx, const char* path, uint64_t size,
                       bool& all_read) {
  all_read = false;
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) return "cannot open the file";
  const uint64_t base = api.gguf_get_data_offset(ctx);
  const int64_t n = api.gguf_get_n_tensors(ctx);
  std::string verdict = "ok";
  std::vector<unsigned char> bytes;
  int64_t read = 0;
  for (int64_t i = 0; i < n; ++i) {  // on past a row-check failure: the bounds of the rest matter
    const std::string name = api.gguf_get_tensor_name(ctx, i);
    const uint64_t offs = base + api.gguf_get_tensor_offset(ctx, i);
    const uint64_t nbytes = api.gguf_get_tensor_size(ctx, i);
    if (offs + nbytes < offs || offs + nbytes > size) {
      verdict = "tensor '" + name + "' data is not within the file bounds";
      break;
    }
    bytes.resize(nbytes);
    if (nbytes != 0 && (std::fseek(f, static_cast<long>(offs), SEEK_SET) != 0 ||
                        std::fread(bytes.data(), 1, nbytes, f) != nbytes)) {
      verdict = "cannot read tensor '" + name + "'";
      break;
    }
    ++read;
    if (!api.ggml_validate_row_data(api.gguf_get_tensor_type(ctx, i), bytes.data(), nbytes) && verdict == "ok") {
      verdict = "tensor '" + name + "': " + first_error("ggml_validate_row_data returned false");
    }
    g_errors.clear();
  }
  std::fclose(f);
  all_read = read == n;
  return verdict;
}

Verdicts judge(const GgmlApi& api, const char* path) {
  Verdicts v;
  const uint64_t size = file_size(path);
  ggml_context* meta = nullptr;
  g_errors.clear();
  gguf_context* ctx = api.gguf_init_from_file(path, gguf_init_params{true, &meta});
  if (ctx == nullptr) {
    v.parser = first_error("gguf_init_from_file returned NULL");
    v.full_read = v.data = "skipped (parser refused)";
    return v;
  }
  bool fits = false;
  v.data = check_data(api, ctx, path, size, fits);
  const int64_t n = api.gguf_get_n_tensors(ctx);
  api.gguf_free(ctx);
  if (meta != nullptr) api.ggml_free(meta);
  if (n > 0 && !fits) {
    v.full_read = "skipped (data not within the file)";
    return v;
  }
  ggml_context* data_ctx = nullptr;
  gguf_context* full = api.gguf_init_from_file(path, gguf_init_params{false, &data_ctx});
  if (full == nullptr) {
    v.full_read = first_error("gguf_init_from_file returned NULL");
  } else {
    api.gguf_free(full);
    if (data_ctx != nullptr) api.ggml_free(data_ctx);
  }
  g_errors.clear();
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LIBGGML_BASE_SO FILE.gguf...\n", argv[0]);
    return 2;
  }
  GgmlApi api;
  std::string error;
  if (!api.load(argv[1], error)) {
    std::fprintf(stderr, "%s: %s\n", argv[1], error.c_str());
    return 2;
  }
  api.ggml_log_set(collect_log, nullptr);
  for (int i = 2; i < argc; ++i) {
    const Verdicts v = judge(api, argv[i]);
    std::printf("{\"file\": %s, \"parser\": %s, \"full_read\": %s, \"data\": %s}\n", json_string(argv[i]).c_str(),
                json_string(v.parser).c_str(), json_string(v.full_read).c_str(), json_string(v.data).c_str());
    std::fflush(stdout);
  }
  return 0;
}
