// A format-neutral list of the tensors of one model (every shard of a
// safetensors checkpoint, or one GGUF file), which profiles and the deep scan
// work on. Built only from headers that passed the structural reader, so every
// (file, offset, nbytes) here lies inside its file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace ckpt {

class JsonDoc;
struct GgufFile;

enum class ModelFormat { safetensors, gguf };

struct ModelTensor {
  std::string name;
  std::string type;             // safetensors dtype name ("BF16") or ggml type name ("Q4_K")
  std::optional<Dtype> dtype;   // safetensors only
  int32_t ggml_type = -1;       // GGUF only
  std::vector<uint64_t> shape;  // safetensors: row-major shape; GGUF: ne (ne[0] first)
  uint32_t file = 0;            // index into ModelView::files
  uint64_t offset = 0;          // absolute byte offset of the payload in its file
  uint64_t nbytes = 0;
  // False when the header's sizes or offsets for this tensor are broken: never read its bytes.
  bool payload_ok = true;
};

struct ModelView {
  ModelFormat format = ModelFormat::safetensors;
  std::vector<std::string> files;         // display names (shard file names, or the GGUF path)
  std::vector<std::string> file_paths;    // paths to open
  std::vector<ModelTensor> tensors;
  std::unordered_map<std::string, size_t> by_name;  // first occurrence
  const JsonDoc* config = nullptr;        // config.json when present
  const GgufFile* gguf = nullptr;         // the GGUF header when format == gguf

  const ModelTensor* find(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &tensors[it->second];
  }
  const std::string& file_of(const ModelTensor& t) const { return files[t.file]; }
  void add(ModelTensor t) {
    by_name.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
  }
};

}  // namespace ckpt
