// ckpt-gpu: the bundled GPU runner. `verify` decodes a checkpoint, a converted checkpoint
// or an expert pack on the device and proves it against the CPU reference; `bench` times
// the kernels against a device-to-device copy. Exit codes: 0 pass, 1 mismatch, invalid
// input or nothing verifiable (0 checks is never a pass), 2 usage, 3 I/O error, 4 no
// usable GPU (use --backend emulate to run the same kernel arithmetic on the host).
#include <unistd.h>

#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "../cli_common.h"
#include "convert/convert.h"
#include "core/build_info.h"
#include "gpu_bench.h"
#include "io/atomic_file.h"
#include "report/verify_report.h"
#include "verify/backend.h"
#include "verify/gpu_verify.h"

namespace {

using ckpt::Outcome;
constexpr const char* kVerify = "ckpt-gpu verify";
constexpr const char* kBench = "ckpt-gpu bench";

struct VerifyArgs {
  std::string path, reference, backend = "gpu", memory_budget = "1G";
  int device = 0;
  uint64_t tokens = 64, gemm_experts = 4;
  double max_rel_l2 = 0.04;
  size_t max_findings = 200;
  ckptcli::CommonFlags c;
  bool stats = false;
  bool full_compare = false;
};


Outcome run_verify(const VerifyArgs& a) {
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.path);
  inputs.add_checkpoint(a.reference);
  if (auto o = ckptcli::check_outputs(kVerify, inputs, {a.c.json, "-"}); o != Outcome::ok) return o;
  ckpt::VerifyOptions o;
  if (!ckpt::parse_size(a.memory_budget, o.memory_budget) || o.memory_budget == 0) {
    return ckptcli::usage_error(kVerify, "--memory-budget '" + a.memory_budget + "' is not a size (e.g. 1G, 512M)");
  }
  // The device opens on a thread of its own (verify/opening_backend.h) while the verifier
  // plans and computes CPU references ahead.
  std::unique_ptr<ckpt::DecodeBackend> backend =
      a.backend == "emulate" ? ckpt::make_emulated_backend() : ckpt::start_gpu_backend(a.device);
  // No device: still a report (schema-valid, verdict fail) for a script that reads --json.
  auto no_device = [&](const std::string& error) {
    ckpt::VerifyReport r;
    r.path = a.path;
    r.reference = a.reference;
    r.backend = "none";
    r.findings.error("NO_DEVICE", "", "", std::nullopt,
                     "no usable GPU: " + error + " (--backend emulate runs the kernels' arithmetic on the host)");
    ckptcli::print_findings(kVerify, r.findings);
    const Outcome written = ckptcli::emit(kVerify, a.c.json, ckpt::verify_report_json(r), inputs);
    return ckpt::worse(Outcome::no_device, written);
  };
  o.reference = a.reference;
  o.tokens = a.tokens;
  o.gemm_experts = a.gemm_experts;
  o.max_rel_l2 = a.max_rel_l2;
  o.full_compare = a.full_compare;
  ckpt::Progress progress(a.c.mode(), "verified", ckpt::Progress::Unit::items, "tensors");
  o.progress = [&](uint64_t done, uint64_t total) { progress.update(done, total); };
  const ckpt::VerifyReport r = ckpt::verify_path(a.path, *backend, o);
  progress.finish();
  if (std::string why; backend->state(&why) == ckpt::BackendState::failed) return no_device(why);
  const Outcome written = ckptcli::emit(kVerify, a.c.json, ckpt::verify_report_json(r, a.stats), inputs);
  if (a.c.human()) std::cout << ckpt::verify_report_text(r, a.max_findings);
  else if (a.c.quiet) ckptcli::print_findings(kVerify, r.findings, ckpt::Severity::error);
  if (a.stats)
    std::fprintf(stderr,
                 "ckpt-gpu stats: %.3f s, %llu jobs, %llu in flight (--memory-budget %s), %llu input bytes decoded, "
                 "peak RSS %llu bytes (%.0f MiB)\nckpt-gpu stages (seconds summed over jobs): %s\n",
                 r.seconds, static_cast<unsigned long long>(r.jobs), static_cast<unsigned long long>(r.jobs_in_flight),
                 a.memory_budget.c_str(), static_cast<unsigned long long>(r.input_bytes_decoded),
                 static_cast<unsigned long long>(r.peak_rss_bytes), static_cast<double>(r.peak_rss_bytes) / (1 << 20),
                 ckpt::verify_stages_text(r.stages).c_str());
  return ckpt::worse(ckpt::outcome_of(r), written);
}

struct BenchArgs {
  int device = 0;
  ckptcli::CommonFlags c;
  ckpt::GpuBenchOptions options;
};

Outcome run_bench(const BenchArgs& a) {
  if (a.options.gemm_k % 32) return ckptcli::usage_error(kBench, "--k must be a multiple of 32");
  std::string report, error;
  if (!ckpt::run_gpu_benchmarks(a.device, a.options, report, error)) {
    ckptcli::print_error(kBench, "NO_DEVICE", "", error);
    return Outcome::no_device;
  }
  if (!a.c.quiet) std::cout << report;
  return Outcome::ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckpt-gpu: decode checkpoints on the GPU and prove them against the CPU reference"};
  app.set_version_flag("--version", std::string("ckptkit ") + ckpt::version_text());
  app.formatter(std::make_shared<ckptcli::SynopsisFormatter>());
  app.require_subcommand(1);

  VerifyArgs v;
  auto* verify = app.add_subcommand("verify", "verify a checkpoint, a converted checkpoint or an expert pack");
  verify->add_option("path", v.path, "checkpoint directory, .safetensors, .gguf, or expert pack directory")->required();
  verify->add_option("--reference", v.reference,
                     "the conversion's input checkpoint, the pack's source GGUF, or for a GGUF file a GGUF to "
                     "compare it with tensor by tensor (needed for a BF16 output: without it nothing is "
                     "verifiable, exit 1)");
  verify->add_option("--device", v.device, "GPU ordinal")->check(CLI::NonNegativeNumber);
  verify->add_option("--backend", v.backend, "gpu (default) or emulate (the kernels' arithmetic on the host)")
      ->check(CLI::IsMember({"gpu", "emulate"}));
  ckptcli::add_json(verify, v.c, "schemas/verify-report.schema.json; also with no GPU (exit 4)");
  verify->add_option("--tokens", v.tokens, "rows of random activations per INT8 GEMM check")->check(CLI::Range(1, 4096));
  verify->add_option("--gemm-experts", v.gemm_experts, "experts per fused matrix given the GEMM check (0 = all)");
  verify->add_option("--max-rel-l2", v.max_rel_l2, "largest INT8 GEMM relative L2 error against the original weights");
  verify->add_option("--max-findings", v.max_findings, "findings printed (JSON has all)");
  ckptcli::add_common(verify, v.c, "errors only: no progress, no summary");
  verify->add_option("--memory-budget", v.memory_budget,
                     "host memory for the buffers of the jobs in flight (default 1G, suffixes K M G T; one job "
                     "runs even if larger)");
  verify->add_flag("--full-compare", v.full_compare,
                   "GGUF and pack: bring every f32 back and compare it, not the device's digest of each step "
                   "(slower; the same findings)");
  verify->add_flag("--stats", v.stats,
                   "print time, jobs in flight, peak RSS and the time per stage to stderr (and the stages into --json)");

  BenchArgs b;
  auto* bench = app.add_subcommand("bench", "kernel throughput against a device-to-device copy; INT8 GEMM rate");
  bench->add_option("--device", b.device, "GPU ordinal")->check(CLI::NonNegativeNumber);
  bench->add_option("--bytes", b.options.bytes, "input bytes per kernel")->check(CLI::Range(uint64_t{1} << 20, uint64_t{4} << 30));
  bench->add_option("--iterations", b.options.iterations, "timed runs per kernel")->check(CLI::Range(1, 1000));
  bench->add_option("--m", b.options.gemm_m, "GEMM M (tokens)")->check(CLI::Range(1, 65536));
  bench->add_option("--n", b.options.gemm_n, "GEMM N (output channels)")->check(CLI::Range(8, 65536));
  bench->add_option("--k", b.options.gemm_k, "GEMM K, a multiple of 32")->check(CLI::Range(32, 65536));
  ckptcli::add_common(bench, b.c, "no report (the exit code says whether it ran)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage mistake exits 2.
    return app.exit(e) == 0 ? ckpt::exit_code_for(Outcome::ok) : ckpt::exit_code_for(Outcome::usage);
  }
  if (!ckptcli::environment_ok("ckpt-gpu")) return ckpt::exit_code_for(Outcome::usage);
  ckpt::install_signal_cleanup();  // a report's temporary goes with Ctrl-C / kill
  if (verify->parsed()) return ckptcli::finish(kVerify, run_verify(v));
  return ckptcli::finish(kBench, run_bench(b));
}
