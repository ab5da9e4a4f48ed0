// Opens whatever PATH names — a checkpoint directory, a .safetensors file or a
// .gguf file (told apart by content, not by extension) — and builds its ModelView.
#pragma once

#include <optional>
#include <string>

#include "core/findings.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/model_view.h"
#include "io/mapped_file.h"

namespace ckpt {

struct LoadedModel {
  std::string path;
  ModelFormat format = ModelFormat::safetensors;
  Checkpoint checkpoint;            // safetensors
  MappedFile gguf_file;             // GGUF
  std::optional<GgufFile> gguf;     // GGUF header, when readable
  ModelView view;

  size_t file_count() const { return view.files.size(); }
};

// Returns false when PATH cannot be read at all (findings say why).
bool load_model(const std::string& path, const StReadOptions& options, LoadedModel& out, Findings& findings);

// The GGUF tensors as a ModelView (offsets absolute, payload_ok from the bounds checks).
ModelView gguf_view(const GgufFile& g, const std::string& display, const std::string& path);

}  // namespace ckpt
