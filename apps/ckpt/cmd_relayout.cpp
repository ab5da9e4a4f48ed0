// `ckpt relayout --tp N [--ep N] [--engine E] [--min-block RxC] [--block RxC] [--bf16 PATTERN...]
// [--dry-run] [--resume|--overwrite] [--memory-budget SIZE] [--json FILE|-] [-q] [--progress] IN OUT`:
// argument parsing and output only; the work is libconvert/relayout/relayout.h, the report
// report/relayout_report.h.
#include <iostream>
#include <memory>

#include "../cli_common.h"
#include "commands.h"
#include "partition_flags.h"
#include "core/partition.h"
#include "core/progress.h"
#include "relayout/relayout.h"
#include "report/relayout_report.h"

namespace ckptcli {
namespace {

constexpr const char* kRelayout = "ckpt relayout";

struct RelayoutArgs {
  std::string input, output, min_block, block, memory_budget = "1G";
  std::string partition;  // "I/N" or "env"
  unsigned tp = 1, ep = 1, partitions = 0;
  bool finalize = false;
  std::vector<std::string> engines, bf16;
  bool dry_run = false, resume = false, overwrite = false, buffered = false;
  std::string sign_key;  // --sign-key
  CommonFlags c;
};

}  // namespace

bool parse_block_size(const std::string& text, uint64_t& n, uint64_t& k) {
  const size_t at = text.find_first_of("xX,");
  if (at == std::string::npos || at == 0 || at + 1 == text.size()) return false;
  uint64_t a = 0, b = 0;
  if (!ckpt::parse_size(text.substr(0, at), a) || !ckpt::parse_size(text.substr(at + 1), b)) return false;
  if (a == 0 || b == 0 || a > (1u << 20) || b > (1u << 20)) return false;
  n = a;
  k = b;
  return true;
}

namespace {

ckpt::Outcome run_relayout(const RelayoutArgs& a) {
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.input);
  inputs.add_file(a.sign_key);
  if (auto o = check_outputs(kRelayout, inputs, {a.c.json, "-"}); o != ckpt::Outcome::ok) return o;
  if (a.resume && a.overwrite) return usage_error(kRelayout, "--resume and --overwrite exclude each other");
  apply_output_io(kRelayout, a.buffered, a.c.quiet);
  ckpt::RelayoutOptions o;
  o.input = a.input;
  o.output = a.output;
  o.dry_run = a.dry_run;
  o.resume = a.resume;
  o.overwrite = a.overwrite;
  if (a.tp == 0 || a.ep == 0) return usage_error(kRelayout, "--tp and --ep are 1 or more");
  for (const auto& pattern : a.bf16)
    if (pattern.find('\n') != std::string::npos) return usage_error(kRelayout, "a --bf16 pattern holds a newline");
  // The options that determine OUT, applied through the mapping a provenance records them by.
  const auto recorded = relayout_options_recorded({a.tp, a.ep, a.engines, a.bf16, a.min_block, a.block});
  if (std::string error; !apply_relayout_options(recorded, o, error)) return usage_error(kRelayout, error);
  if (!resolve_scale_out(kRelayout, "writes", a.partition, a.partitions, a.finalize, o.partition, o.partitions))
    return ckpt::Outcome::usage;
  o.finalize = a.finalize;
  if (auto o = check_sign_key(kRelayout, a.sign_key); o != ckpt::Outcome::ok) return o;
  if (!a.sign_key.empty()) {
    if (a.dry_run || !a.partition.empty())
      return usage_error(kRelayout, "--sign-key signs a whole output (not --dry-run or --partition; --finalize signs)");
    o.attestation_files = {std::string(ckpt::oms::kOutputBundleName), std::string(ckpt::oms::kProvenanceName)};
    o.hash_inputs = true;  // the provenance records IN's shards as converted, without a second read
    ckpt::oms::ConversionAttestation att{"relayout", a.input, a.output, recorded, "", a.sign_key};
    o.after_finalize = attest_after_finalize(att, a.c.mode());
  }
  if (!ckpt::parse_size(a.memory_budget, o.memory_budget))
    return usage_error(kRelayout, "--memory-budget '" + a.memory_budget + "' is not a size (e.g. 1G)");
  ckpt::Progress progress(a.c.mode(), "relayout");
  o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  bool plan_shown = false;
  if (a.c.human())
    o.on_plan = [&](const ckpt::RelayoutReport& planned) {
      ckpt::print_relayout_plan(planned, std::cout);
      std::cout << std::flush;
      plan_shown = true;
    };
  auto report = ckpt::relayout_checkpoint(o);
  progress.finish();
  const ckpt::Outcome result = ckpt::relayout_outcome(report);
  const ckpt::Outcome written = emit(kRelayout, a.c.json, ckpt::relayout_json(report, o), inputs);
  print_findings(kRelayout, report.findings, ckpt::Severity::error);
  print_findings(kRelayout, report.convert.findings, ckpt::Severity::error);
  if (a.c.human()) {
    if (!plan_shown && report.plan.needed && report.plan.problem.empty()) ckpt::print_relayout_plan(report, std::cout);
    for (const auto& f : report.findings.items())
      if (f.severity == ckpt::Severity::info) std::cout << ckpt::finding_text(f) << "\n";
    for (const auto& f : report.convert.findings.items())
      if (f.severity == ckpt::Severity::info) std::cout << ckpt::finding_text(f) << "\n";
  }
  if (!a.c.json_to_stdout() && !a.c.quiet) ckpt::print_relayout_verdict(report, o, std::cout);
  return ckpt::worse(result, written);
}

}  // namespace

Command add_relayout_command(CLI::App& app) {
  auto args = std::make_shared<RelayoutArgs>();
  Command c;
  c.name = kRelayout;
  c.sub = app.add_subcommand("relayout",
                             "Rewrite a block-FP8 checkpoint so that it loads at --tp/--ep: scales re-blocked exactly "
                             "(FP8 bytes unchanged); modules that cannot be re-blocked promoted to BF16");
  c.sub->add_option("input", args->input, "block-FP8 checkpoint directory (read only)")->required();
  c.sub->add_option("output", args->output, "output directory (new, or a previous ckptkit output with --resume/--overwrite)")
      ->required();
  c.sub->add_option("--tp", args->tp, "target tensor-parallel degree (default 1)");
  c.sub->add_option("--ep", args->ep, "target expert-parallel degree, dividing --tp (default 1)");
  c.sub->add_option("--engine", args->engines,
                    "vllm, sglang or transformers (repeatable; default: vllm and sglang, as ckpt preflight)")
      ->check(CLI::IsMember({"vllm", "sglang", "transformers"}));
  c.sub->add_option("--min-block", args->min_block,
                    "smallest block ROWSxCOLS re-blocking may choose (default: what the engines' kernels accept, "
                    "schemas/deploy/engines.json); a module needing less is promoted to BF16");
  c.sub->add_option("--block", args->block,
                    "the new block ROWSxCOLS (dividing the checkpoint's); modules it does not fit are promoted to BF16");
  c.sub->add_option("--bf16", args->bf16,
                    "promote the module class of the modules this pattern names to BF16 (repeatable; names as in "
                    "modules_to_not_convert: dotted components, fnmatch or re:)");
  c.sub->add_flag("--dry-run", args->dry_run, "print the plan with the bytes of each choice; write nothing");
  c.sub->add_flag("--resume", args->resume, "finish an interrupted relayout: shards whose record proves them are kept");
  c.sub->add_flag("--overwrite", args->overwrite, "replace a previous ckptkit output in OUT");
  c.sub->add_option("--memory-budget", args->memory_budget, "memory for buffers in flight (default 1G, at least 64M)");
  c.sub->add_option("--partition", args->partition,
                    "I/N or env: write only the shards of partition I of N (and their records), as ckpt convert");
  c.sub->add_option("--partitions", args->partitions, "N for --partition env or --finalize (default: CKPT_PARTITIONS)");
  c.sub->add_flag("--finalize", args->finalize,
                  "verify every partition's shards, then write the index, config.json and side files");
  add_buffered(c.sub, args->buffered);
  add_sign_key_option(c.sub, args->sign_key);
  add_json(c.sub, args->c, "schemas/relayout-report.schema.json");
  add_common(c.sub, args->c);
  c.run = [args] { return run_relayout(*args); };
  return c;
}

}  // namespace ckptcli
