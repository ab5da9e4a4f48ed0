// consumer PATH: loads a checkpoint or GGUF file through the installed libconvert and prints
// its format, files and tensors; exit 1 when the loader reports errors.
#include <cstdio>

#include "core/build_info.h"
#include "formats/loader.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer PATH\n");
    return 2;
  }
  ckpt::LoadedModel model;
  ckpt::Findings findings;
  bool ok = ckpt::load_model(argv[1], ckpt::StReadOptions{}, model, findings);
  std::printf("ckptkit %s: %s: %zu files, %zu tensors, %zu errors\n", ckpt::version_text().c_str(), argv[1],
              model.file_count(), model.view.tensors.size(), findings.count(ckpt::Severity::error));
  return ok && !findings.has_errors() ? 0 : 1;
}
