// `ckpt dump PATH TENSOR [--as f32|raw] [-o FILE]`: one tensor's values as little-endian
// f32 (exactly what ggml's to_float gives for GGUF blocks), or its stored bytes. Output
// goes to stdout, or atomically to FILE (never a half-written file at that name, never
// over a file of the checkpoint: io/output_file.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>

#include "../cli_common.h"
#include "commands.h"
#include "formats/loader.h"
#include "model/tensor_values.h"

namespace ckptcli {
namespace {

constexpr const char* kDump = "ckpt dump";

struct DumpArgs {
  std::string path, tensor, as = "f32", out;
  bool buffered = false;
  CommonFlags c;
};

ckpt::Outcome run_dump(const DumpArgs& a) {
  const std::string target = a.out.empty() ? "-" : a.out;
  if (target == "-" && isatty(STDOUT_FILENO))
    return usage_error(kDump, "refusing to write binary data to a terminal; use -o FILE or redirect stdout");
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.path);
  if (auto o = check_outputs(kDump, inputs, {target}); o != ckpt::Outcome::ok) return o;
  ckpt::LoadedModel model;
  ckpt::Findings findings;
  if (!ckpt::load_model(a.path, ckpt::StReadOptions{}, model, findings)) {
    print_findings(kDump, findings, ckpt::Severity::error);
    const ckpt::Outcome o = ckpt::outcome_of(findings);
    return o == ckpt::Outcome::ok ? ckpt::Outcome::io : o;
  }
  apply_output_io(kDump, a.buffered, a.c.quiet);
  ckpt::OutputFile out(target, inputs, ckpt::OutputUse::bulk);
  std::string error;
  if (auto o = out.open(error); o != ckpt::Outcome::ok) {
    print_error(kDump, o == ckpt::Outcome::usage ? "OUTPUT_IS_INPUT" : "IO_WRITE", target, error);
    return o;
  }
  std::string write_error;
  auto sink = [&](std::span<const uint8_t> b) { return out.write(b.data(), b.size(), write_error); };
  ckpt::DumpError why = ckpt::DumpError::none;
  const auto as = a.as == "raw" ? ckpt::DumpAs::raw : ckpt::DumpAs::f32;
  if (!ckpt::dump_tensor(model, a.tensor, as, sink, error, &why)) {
    // The temporary of a file output goes with `out`: never a partial file at FILE.
    print_error(kDump, why == ckpt::DumpError::sink ? "IO_WRITE" : "DUMP", why == ckpt::DumpError::sink ? target : a.path,
                why == ckpt::DumpError::sink ? write_error : error);
    return ckpt::outcome_of(why);
  }
  if (auto o = out.commit(error); o != ckpt::Outcome::ok) {
    print_error(kDump, "IO_WRITE", target, error);
    return o;
  }
  return ckpt::Outcome::ok;
}

}  // namespace

Command add_dump_command(CLI::App& app) {
  auto args = std::make_shared<DumpArgs>();
  Command c;
  c.name = kDump;
  c.sub = app.add_subcommand("dump", "Write one tensor's values as little-endian f32 or its raw bytes");
  c.sub->add_option("path", args->path, "Checkpoint directory, .safetensors or .gguf file")->required();
  c.sub->add_option("tensor", args->tensor, "Tensor name")->required();
  c.sub->add_option("--as", args->as, "f32 (dequantized, little-endian) or raw (stored bytes)")
      ->check(CLI::IsMember({"f32", "raw"}));
  c.sub->add_option("-o,--output", args->out,
                    "Write to FILE atomically instead of stdout (never a file or directory of the input)");
  add_buffered(c.sub, args->buffered);
  add_common(c.sub, args->c, "errors only (dump prints nothing else)");
  c.run = [args] { return run_dump(*args); };
  return c;
}

}  // namespace ckptcli
