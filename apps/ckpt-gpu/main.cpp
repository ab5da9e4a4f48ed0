// ckpt-gpu: the bundled GPU runner. `verify` decodes a checkpoint, a converted checkpoint
// or an expert pack on the device and proves it against the CPU reference; `bench` times
// the kernels against a device-to-device copy. Exit codes: 0 pass, 1 mismatch, invalid
// input or nothing verifiable (0 checks is never a pass), 2 usage, 3 I/O error, 4 no
// usable GPU (use --backend emulate to run the same kernel arithmetic on the host).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "core/build_info.h"
#include "gpu_bench.h"
#include "io/atomic_file.h"
#include "report/verify_report.h"
#include "verify/backend.h"
#include "verify/gpu_verify.h"

namespace {

enum ExitCode : int { kOk = 0, kFindings = 1, kUsage = 2, kIoError = 3, kNoDevice = 4 };

bool emit(const std::string& target, const std::string& text) {
  std::string error;
  if (ckpt::write_report(target, text, error)) return true;
  std::cerr << "ckpt-gpu: " << error << "\n";
  return false;
}

struct VerifyArgs {
  std::string path, reference, json, backend = "gpu";
  int device = 0;
  uint64_t tokens = 64, gemm_experts = 4;
  double max_rel_l2 = 0.04;
  size_t max_findings = 200;
  bool quiet = false;
};

int run_verify(const VerifyArgs& a) {
  std::unique_ptr<ckpt::DecodeBackend> backend;
  if (a.backend == "emulate") {
    backend = ckpt::make_emulated_backend();
  } else {
    std::string error;
    backend = ckpt::make_gpu_backend(a.device, error);
    if (!backend) {
      std::cerr << "ckpt-gpu: no usable GPU: " << error << "\n";
      return kNoDevice;
    }
  }
  ckpt::VerifyOptions o;
  o.reference = a.reference;
  o.tokens = a.tokens;
  o.gemm_experts = a.gemm_experts;
  o.max_rel_l2 = a.max_rel_l2;
  const bool show = !a.quiet && isatty(STDERR_FILENO);
  auto last = std::chrono::steady_clock::now();
  if (show) {
    o.progress = [&](uint64_t done, uint64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(100) && done < total) return;
      last = now;
      std::fprintf(stderr, "\r  verified %llu / %llu tensors   ", static_cast<unsigned long long>(done),
                   static_cast<unsigned long long>(total));
    };
  }
  const ckpt::VerifyReport r = ckpt::verify_path(a.path, *backend, o);
  if (show) std::fprintf(stderr, "\r%50s\r", "");
  if (!a.json.empty() && !emit(a.json, ckpt::verify_report_json(r))) return kIoError;
  if (!a.quiet && a.json != "-") std::cout << ckpt::verify_report_text(r, a.max_findings);
  return r.exit_code();
}

struct BenchArgs {
  int device = 0;
  ckpt::GpuBenchOptions options;
};

int run_bench(const BenchArgs& a) {
  std::string report, error;
  if (!ckpt::run_gpu_benchmarks(a.device, a.options, report, error)) {
    std::cerr << "ckpt-gpu: " << error << "\n";
    return kNoDevice;
  }
  std::cout << report;
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ckpt-gpu: decode checkpoints on the GPU and prove them against the CPU reference"};
  app.set_version_flag("--version", std::string("ckptkit ") + ckpt::version_text());
  app.require_subcommand(1);

  VerifyArgs v;
  auto* verify = app.add_subcommand("verify", "verify a checkpoint, a converted checkpoint or an expert pack");
  verify->add_option("path", v.path, "checkpoint directory, .safetensors, .gguf, or expert pack directory")->required();
  verify->add_option("--reference", v.reference,
                     "the conversion's input checkpoint, or the pack's source GGUF (needed for a BF16 output: "
                     "without it nothing is verifiable, exit 1)");
  verify->add_option("--device", v.device, "GPU ordinal")->check(CLI::NonNegativeNumber);
  verify->add_option("--backend", v.backend, "gpu (default) or emulate (the kernels' arithmetic on the host)")
      ->check(CLI::IsMember({"gpu", "emulate"}));
  verify->add_option("--json", v.json, "write the JSON report (schemas/verify-report.schema.json) to FILE or -");
  verify->add_option("--tokens", v.tokens, "rows of random activations per INT8 GEMM check")->check(CLI::Range(1, 4096));
  verify->add_option("--gemm-experts", v.gemm_experts, "experts per fused matrix given the GEMM check (0 = all)");
  verify->add_option("--max-rel-l2", v.max_rel_l2, "largest INT8 GEMM relative L2 error against the original weights");
  verify->add_option("--max-findings", v.max_findings, "findings printed (JSON has all)");
  verify->add_flag("-q,--quiet", v.quiet, "print nothing but errors");

  BenchArgs b;
  auto* bench = app.add_subcommand("bench", "kernel throughput against a device-to-device copy; INT8 GEMM rate");
  bench->add_option("--device", b.device, "GPU ordinal")->check(CLI::NonNegativeNumber);
  bench->add_option("--bytes", b.options.bytes, "input bytes per kernel")->check(CLI::Range(uint64_t{1} << 20, uint64_t{4} << 30));
  bench->add_option("--iterations", b.options.iterations, "timed runs per kernel")->check(CLI::Range(1, 1000));
  bench->add_option("--m", b.options.gemm_m, "GEMM M (tokens)")->check(CLI::Range(1, 65536));
  bench->add_option("--n", b.options.gemm_n, "GEMM N (output channels)")->check(CLI::Range(8, 65536));
  bench->add_option("--k", b.options.gemm_k, "GEMM K, a multiple of 32")->check(CLI::Range(32, 65536));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  ckpt::install_signal_cleanup();  // a report's temporary goes with Ctrl-C / kill
  if (verify->parsed()) return run_verify(v);
  if (b.options.gemm_k % 32) {
    std::cerr << "ckpt-gpu: --k must be a multiple of 32\n";
    return kUsage;
  }
  return run_bench(b);
}
