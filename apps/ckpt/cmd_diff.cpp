// `ckpt diff A B [--max N] [--json FILE|-]`: what changed between two models, tensor by
// tensor (libconvert/diff/diff.h). Exit 0 same, 1 different, 3 I/O error.
#include <iostream>
#include <memory>

#include "commands.h"
#include "diff/diff.h"
#include "io/atomic_file.h"

namespace ckptcli {
namespace {

struct DiffArgs {
  std::string a, b, json;
  uint64_t max = 50;
  bool quiet = false;
};

int run_diff(const DiffArgs& args) {
  ckpt::DiffOptions o;
  o.max_reported = args.max;
  const ckpt::DiffReport r = ckpt::diff_models(args.a, args.b, o);
  for (const auto& f : r.findings.items())
    std::cerr << "ckpt diff: " << ckpt::severity_name(f.severity) << " " << f.code << ": " << f.file
              << (f.tensor.empty() ? "" : " [" + f.tensor + "]") << ": " << f.message << "\n";
  if (!args.json.empty()) {
    const std::string text = ckpt::diff_report_json(r);
    std::string error;
    if (args.json == "-") {
      std::cout << text << std::flush;
    } else if (!ckpt::write_file_atomic(args.json, text, error)) {
      std::cerr << "ckpt diff: " << error << "\n";
      return kIoError;
    }
  }
  if (args.json != "-" && !args.quiet) std::cout << ckpt::diff_report_text(r) << std::flush;
  switch (r.status) {
    case ckpt::DiffStatus::same: return kOk;
    case ckpt::DiffStatus::different: return kFindings;
    case ckpt::DiffStatus::bad_input: return kFindings;
    default: return kIoError;
  }
}

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto args = std::make_shared<DiffArgs>();
  Command c;
  c.sub = app.add_subcommand("diff", "Compare two models tensor by tensor (first difference, counts, max abs/rel diff)");
  c.sub->add_option("a", args->a, "first model (checkpoint directory, .safetensors, .gguf, expert pack)")->required();
  c.sub->add_option("b", args->b, "second model")->required();
  c.sub->add_option("--max", args->max, "list at most N tensors (default 50; the counts cover all)");
  c.sub->add_option("--json", args->json, "write the JSON report to FILE, or - for stdout");
  c.sub->add_flag("-q,--quiet", args->quiet, "no text report; the exit code says it");
  c.run = [args] { return run_diff(*args); };
  return c;
}

}  // namespace ckptcli
