#include "formats/loader.h"

#include <cstring>
#include <filesystem>

#include "core/checked_math.h"
#include "core/ggml_types.h"

namespace ckpt {
namespace fs = std::filesystem;

namespace {

bool starts_with_gguf_magic(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return false;
  MappedFile f;
  IoError err;
  if (!f.open(path, err) || f.size() < 4) return false;
  uint8_t magic[4];
  return f.read_at(0, magic, err) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

ModelView gguf_view(const GgufFile& g, const std::string& display, const std::string& path) {
  ModelView view;
  view.format = ModelFormat::gguf;
  view.gguf = &g;
  view.files.push_back(display);
  view.file_paths.push_back(path);
  for (const auto& t : g.tensors) {
    ModelTensor m;
    m.name = t.name;
    m.type = ggml_type_name(t.type);
    m.ggml_type = t.type;
    m.shape.assign(t.ne, t.ne + std::max<uint32_t>(t.n_dims, 1));
    m.file = 0;
    auto abs = checked_add(g.data_start, t.offset);
    auto end = abs ? checked_add(*abs, t.nbytes) : std::nullopt;
    m.offset = abs.value_or(0);
    m.nbytes = t.nbytes;
    m.payload_ok = end && *end <= g.file_size && ggml_type_info(t.type) && !ggml_type_info(t.type)->removed;
    view.add(std::move(m));
  }
  return view;
}

bool load_model(const std::string& path, const StReadOptions& options, LoadedModel& out, Findings& findings) {
  out.path = path;
  if (starts_with_gguf_magic(path) || (path.size() > 5 && path.ends_with(".gguf"))) {
    out.format = ModelFormat::gguf;
    IoError err;
    if (!out.gguf_file.open(path, err)) {
      findings.error("IO_OPEN", path, "", std::nullopt, "cannot read " + path + ": " + err.message);
      return false;
    }
    std::string display = fs::path(path).filename().string();
    out.gguf = read_gguf(out.gguf_file, display, findings);
    if (out.gguf) out.view = gguf_view(*out.gguf, display, path);
    return true;
  }
  out.format = ModelFormat::safetensors;
  if (!open_checkpoint(path, options, out.checkpoint, findings)) return false;
  out.view = checkpoint_view(out.checkpoint);
  return true;
}

}  // namespace ckpt
