// `ckpt preflight [--tp N] [--ep N] [--pp N] [--gpu ARCH] [--gpu-memory SIZE] [--engine E]
// [--kv-cache-dtype D] [--max-model-len N] [--json FILE|-] [-q] CKPT`: argument parsing and output only; the checks are
// libconvert/deploy/preflight.h, the report report/preflight_report.h.
#include <iostream>
#include <memory>

#include "../cli_common.h"
#include "commands.h"
#include "convert/convert.h"
#include "deploy/preflight.h"
#include "report/preflight_report.h"

namespace ckptcli {
namespace {

constexpr const char* kPreflight = "ckpt preflight";

struct PreflightArgs {
  std::string path, gpu, gpu_memory, kv_cache_dtype = "auto";
  uint64_t max_model_len = 0;
  unsigned tp = 1, ep = 1, pp = 1;
  std::vector<std::string> engines;
  CommonFlags c;
};

ckpt::Outcome run_preflight(const PreflightArgs& a) {
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.path);
  if (auto o = check_outputs(kPreflight, inputs, {a.c.json, "-"}); o != ckpt::Outcome::ok) return o;
  ckpt::PreflightOptions o;
  o.deployment = {a.tp, a.ep, a.pp};
  o.gpu = a.gpu;
  o.engines = a.engines;
  o.kv_cache_dtype = a.kv_cache_dtype;
  o.max_model_len = a.max_model_len;
  if (!a.gpu_memory.empty() && (!ckpt::parse_size(a.gpu_memory, o.gpu_memory) || o.gpu_memory == 0))
    return usage_error(kPreflight, "--gpu-memory '" + a.gpu_memory + "' is not a size (a number with K, M, G or T, e.g. 80G)");
  const auto report = ckpt::preflight(a.path, o);
  const ckpt::Outcome result = ckpt::preflight_outcome(report);
  const ckpt::Outcome written = emit(kPreflight, a.c.json, ckpt::preflight_json(report), inputs);
  if (a.c.human()) {
    ckpt::print_preflight_human(report, std::cout);
  } else {
    print_findings(kPreflight, report.findings, ckpt::Severity::error);
    if (!a.c.json_to_stdout()) std::cout << ckpt::preflight_verdict_line(report) << "\n";
  }
  return ckpt::worse(result, written);
}

}  // namespace

Command add_preflight_command(CLI::App& app) {
  auto args = std::make_shared<PreflightArgs>();
  Command c;
  c.name = kPreflight;
  c.sub = app.add_subcommand("preflight",
                             "Will CKPT load, and load right, at this TP/EP on this GPU? (from config.json alone, or the headers)");
  c.sub->add_option("ckpt", args->path,
                    "checkpoint directory, or a directory holding only config.json (and optionally the index)")
      ->required();
  c.sub->add_option("--tp", args->tp, "tensor-parallel degree (default 1)");
  c.sub->add_option("--ep", args->ep, "expert-parallel degree, dividing --tp: experts whole per rank when ep = tp (default 1)");
  c.sub->add_option("--pp", args->pp, "pipeline-parallel stages (memory per rank only; default 1)");
  c.sub->add_option("--gpu", args->gpu,
                    "GPU architecture for the kernel check: sm80, sm86, sm89, sm90, sm100, sm120, gfx90a, gfx942, gfx1100");
  c.sub->add_option("--gpu-memory", args->gpu_memory,
                    "memory of one GPU (binary units: 80G = 80 GiB): the largest rank's weights must fit");
  c.sub->add_option("--engine", args->engines,
                    "vllm, sglang or transformers (repeatable; default: vllm and sglang, blocking when either refuses)")
      ->check(CLI::IsMember({"vllm", "sglang", "transformers"}));
  c.sub->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                    "with --gpu-memory: the KV cache's dtype for the tokens that fit (auto = the model's BF16, bf16, fp16, fp8)")
      ->check(CLI::IsMember({"auto", "bf16", "fp16", "fp8"}));
  c.sub->add_option("--max-model-len", args->max_model_len,
                    "with --gpu-memory: also count the sequences of this many tokens that fit");
  add_json(c.sub, args->c, "schemas/preflight-report.schema.json");
  add_quiet(c.sub, args->c, "print only the errors and the verdict line");
  c.run = [args] { return run_preflight(*args); };
  return c;
}

}  // namespace ckptcli
