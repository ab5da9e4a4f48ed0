// `ckpt dump PATH TENSOR [--as f32|raw] [-o FILE]`: one tensor's values as little-endian
// f32 (exactly what ggml's to_float gives for GGUF blocks), or its stored bytes. Output
// goes to stdout, or atomically to FILE (never a half-written file at that name).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.h"
#include "formats/loader.h"
#include "model/tensor_values.h"
#include "io/atomic_file.h"

namespace ckptcli {
namespace {

struct DumpArgs {
  std::string path, tensor, as = "f32", out;
};

int exit_code_for(ckpt::DumpError e) {
  switch (e) {
    case ckpt::DumpError::none: return kOk;
    case ckpt::DumpError::io:
    case ckpt::DumpError::sink: return kIoError;
    default: return kFindings;
  }
}

// Writes every byte to fd (retrying short writes and EINTR).
bool write_all(int fd, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return true;
}

// An existing non-regular target (/dev/null, a FIFO) is written in place: renaming a
// temporary over a device would replace the device node.
bool is_special_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

int dump_to_fd(const ckpt::LoadedModel& m, const DumpArgs& a, int fd) {
  std::string error;
  ckpt::DumpError why = ckpt::DumpError::none;
  auto sink = [fd](std::span<const uint8_t> b) { return write_all(fd, b); };
  const auto as = a.as == "raw" ? ckpt::DumpAs::raw : ckpt::DumpAs::f32;
  if (ckpt::dump_tensor(m, a.tensor, as, sink, error, &why)) return kOk;
  if (why == ckpt::DumpError::sink) error = "writing " + (a.out.empty() ? std::string("stdout") : a.out) + ": " + std::strerror(errno);
  std::cerr << "ckpt dump: " << error << "\n";
  return exit_code_for(why);
}

int dump_atomic(const ckpt::LoadedModel& m, const DumpArgs& a) {
  ckpt::AtomicOutput out(a.out);
  std::string error;
  if (!out.open(error)) {
    std::cerr << "ckpt dump: " << error << "\n";
    return kIoError;
  }
  int rc = dump_to_fd(m, a, out.fd());
  if (rc != kOk) return rc;  // AtomicOutput removes its temporary file
  if (!out.commit(error)) {
    std::cerr << "ckpt dump: " << error << "\n";
    return kIoError;
  }
  return kOk;
}

int dump_special(const ckpt::LoadedModel& m, const DumpArgs& a) {
  int fd = ::open(a.out.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    std::cerr << "ckpt dump: cannot open " << a.out << ": " << std::strerror(errno) << "\n";
    return kIoError;
  }
  int rc = dump_to_fd(m, a, fd);
  if (::close(fd) != 0 && rc == kOk) rc = kIoError;
  return rc;
}

int run_dump(const DumpArgs& a) {
  if (a.out.empty() && isatty(STDOUT_FILENO)) {
    std::cerr << "ckpt dump: refusing to write binary data to a terminal; use -o FILE or redirect stdout\n";
    return kUsage;
  }
  if (!a.out.empty() && same_file(a.out, a.path)) {
    std::cerr << "ckpt dump: -o " << a.out << " is the input\n";
    return kUsage;
  }
  ckpt::LoadedModel model;
  ckpt::Findings findings;
  if (!ckpt::load_model(a.path, ckpt::StReadOptions{}, model, findings)) {
    for (const auto& f : findings.items()) std::cerr << "ckpt dump: " << f.file << ": " << f.message << "\n";
    return findings.has_io_errors() || !findings.has_errors() ? kIoError : kFindings;
  }
  if (a.out.empty()) return dump_to_fd(model, a, STDOUT_FILENO);
  return is_special_file(a.out) ? dump_special(model, a) : dump_atomic(model, a);
}

}  // namespace

Command add_dump_command(CLI::App& app) {
  auto args = std::make_shared<DumpArgs>();
  Command c;
  c.sub = app.add_subcommand("dump", "Write one tensor's values as little-endian f32 or its raw bytes");
  c.sub->add_option("path", args->path, "Checkpoint directory, .safetensors or .gguf file")->required();
  c.sub->add_option("tensor", args->tensor, "Tensor name")->required();
  c.sub->add_option("--as", args->as, "f32 (dequantized, little-endian) or raw (stored bytes)")
      ->check(CLI::IsMember({"f32", "raw"}));
  c.sub->add_option("-o,--output", args->out, "Write to FILE atomically instead of stdout");
  c.run = [args] { return run_dump(*args); };
  return c;
}

}  // namespace ckptcli
