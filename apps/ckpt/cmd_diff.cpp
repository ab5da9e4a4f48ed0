// `ckpt diff A B [--max N] [--json FILE|-]`: what changed between two models, tensor by
// tensor (libconvert/diff/diff.h). Exit 0 same, 1 different, 3 I/O error.
#include <iostream>
#include <memory>

#include "../cli_common.h"
#include "commands.h"
#include "diff/diff.h"

namespace ckptcli {
namespace {

constexpr const char* kDiff = "ckpt diff";

struct DiffArgs {
  std::string a, b;
  uint64_t max = 50;
  CommonFlags c;
};

ckpt::Outcome run_diff(const DiffArgs& args) {
  ckpt::InputSet inputs;
  inputs.add_checkpoint(args.a);
  inputs.add_checkpoint(args.b);
  if (auto o = check_outputs(kDiff, inputs, {args.c.json, "-"}); o != ckpt::Outcome::ok) return o;
  ckpt::DiffOptions o;
  o.max_reported = args.max;
  const ckpt::DiffReport r = ckpt::diff_models(args.a, args.b, o);
  print_findings(kDiff, r.findings, ckpt::Severity::info);
  const ckpt::Outcome written = emit(kDiff, args.c.json, ckpt::diff_report_json(r), inputs);
  if (args.c.human()) std::cout << ckpt::diff_report_text(r);
  return ckpt::worse(ckpt::outcome_of(r.status), written);
}

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto args = std::make_shared<DiffArgs>();
  Command c;
  c.name = kDiff;
  c.sub = app.add_subcommand("diff", "Compare two models tensor by tensor (first difference, counts, max abs/rel diff)");
  c.sub->add_option("a", args->a, "first model (checkpoint directory, .safetensors, .gguf, expert pack)")->required();
  c.sub->add_option("b", args->b, "second model")->required();
  c.sub->add_option("--max", args->max, "list at most N tensors (default 50; the counts cover all)");
  add_json(c.sub, args->c, "schemas/diff-report.schema.json");
  add_common(c.sub, args->c, "no text report; errors only, the exit code says it");
  c.run = [args] { return run_diff(*args); };
  return c;
}

}  // namespace ckptcli
