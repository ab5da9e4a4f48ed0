// `ckpt hash PATH [--algo xxh3|sha256|both] [--dequant] [-o FILE]`: a deterministic hash
// manifest (schemas/hash-manifest.schema.json); `ckpt hash --check MANIFEST PATH`: the
// coreutils `-c` style check of PATH against it. The work is libconvert/hashman/.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>

#include "commands.h"
#include "hashman/check.h"
#include "hashman/manifest.h"
#include "io/atomic_file.h"
#include "io/input_file.h"

namespace ckptcli {
namespace {

struct HashArgs {
  std::string path, algo = "xxh3", out, check;
  bool dequant = false, quiet = false, status = false, no_file_hashes = false;
};

// "  hash 1.20 / 3.40 GB" on stderr, redrawn at most every 100 ms, only on a terminal.
class Progress {
 public:
  Progress(bool enabled, uint64_t total) : enabled_(enabled && isatty(STDERR_FILENO)), total_(total) {}
  ~Progress() {
    if (shown_) std::fprintf(stderr, "\r%50s\r", "");
  }
  void add(uint64_t n) {
    if (!enabled_) return;
    const uint64_t done = done_ += n;
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    if (total_)
      std::fprintf(stderr, "\r  hash %.2f / %.2f GB   ", static_cast<double>(done) / 1e9, static_cast<double>(total_) / 1e9);
    else
      std::fprintf(stderr, "\r  hash %.2f GB   ", static_cast<double>(done) / 1e9);
    shown_ = true;
  }

 private:
  bool enabled_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  std::mutex mu_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

uint64_t total_file_bytes(const ckpt::ModelView& v) {
  uint64_t total = 0;
  for (const auto& p : v.file_paths) {
    std::error_code ec;
    auto n = std::filesystem::file_size(p, ec);
    if (!ec) total += n;
  }
  return total;
}

void print_findings(const ckpt::Findings& f) {
  for (const auto& x : f.items())
    std::cerr << "ckpt hash: " << ckpt::severity_name(x.severity) << " " << x.code << ": " << x.file
              << (x.tensor.empty() ? "" : " [" + x.tensor + "]") << ": " << x.message << "\n";
}

int exit_for(const ckpt::Findings& f) { return f.has_io_errors() || !f.has_errors() ? kIoError : kFindings; }

int run_make(const HashArgs& a) {
  ckpt::HashSource src;
  ckpt::Findings f;
  if (!ckpt::open_hash_source(a.path, src, f)) {
    print_findings(f);
    return exit_for(f);
  }
  ckpt::HashOptions o;
  o.algos.xxh3 = a.algo != "sha256";
  o.algos.sha256 = a.algo != "xxh3";
  o.dequant = a.dequant;
  o.file_hashes = !a.no_file_hashes;
  Progress progress(!a.quiet, total_file_bytes(src.view));
  o.on_progress = [&](uint64_t n) { progress.add(n); };
  ckpt::HashManifest m;
  if (!ckpt::build_hash_manifest(src, o, m, f)) {
    print_findings(f);
    return kIoError;
  }
  const std::string text = ckpt::hash_manifest_json(m);
  if (a.out.empty() || a.out == "-") {
    std::cout << text << std::flush;
    return std::cout ? kOk : kIoError;
  }
  std::string error;
  if (!ckpt::write_file_atomic(a.out, text, error)) {
    std::cerr << "ckpt hash: " << error << "\n";
    return kIoError;
  }
  return kOk;
}

int run_check(const HashArgs& a) {
  // One input open (io/input_file.h): a FIFO or device is refused unread, and a manifest
  // larger than the parser's limit is refused unread.
  std::string text;
  ckpt::IoError err;
  if (!ckpt::read_input_file(a.check, ckpt::kMaxHashManifestBytes, text, err)) {
    std::cerr << "ckpt hash: " << a.check << ": cannot read the manifest: " << err.message << "\n";
    return kIoError;
  }
  ckpt::HashManifest expected;
  ckpt::Findings pf;
  if (!ckpt::parse_hash_manifest(text, a.check, expected, pf)) {
    print_findings(pf);
    return kFindings;
  }
  ckpt::HashOptions o;
  auto progress = std::make_shared<Progress>(!a.quiet && !a.status, 0);
  o.on_progress = [progress](uint64_t n) { progress->add(n); };
  ckpt::CheckResult r = ckpt::check_hash_manifest(expected, a.path, o);
  progress.reset();
  if (r.status == ckpt::CheckStatus::io_error || r.status == ckpt::CheckStatus::bad_input) print_findings(r.findings);
  if (!a.status) {
    std::cout << ckpt::check_lines_text(r, a.quiet) << std::flush;
    if (r.checked && (r.failed || !a.quiet)) std::cerr << ckpt::check_summary_text(r);
  }
  switch (r.status) {
    case ckpt::CheckStatus::ok: return kOk;
    case ckpt::CheckStatus::mismatch: return kFindings;
    case ckpt::CheckStatus::bad_input: return kFindings;
    default: return kIoError;
  }
}

}  // namespace

Command add_hash_command(CLI::App& app) {
  auto args = std::make_shared<HashArgs>();
  Command c;
  c.sub = app.add_subcommand("hash", "Hash manifest of a model (per tensor, per file, whole model), or --check one");
  c.sub->add_option("path", args->path,
                    "Checkpoint directory, .safetensors, .gguf or expert pack directory (a directory: every file "
                    "in it, hidden entries skipped)")
      ->required();
  c.sub->add_option("--algo", args->algo, "xxh3 (default), sha256 or both")
      ->check(CLI::IsMember({"xxh3", "sha256", "both"}));
  c.sub->add_flag("--dequant", args->dequant, "also hash every tensor's values decoded to little-endian f32");
  c.sub->add_flag("--no-file-hashes", args->no_file_hashes,
                  "shards get name and size only (tensors in parallel; one SHA-256 pass instead of two); "
                  "config, index, tokenizer and other files are always hashed");
  c.sub->add_option("-o,--output", args->out, "write the manifest to FILE atomically (default stdout)");
  c.sub->add_option("-c,--check", args->check, "check PATH against this manifest (NAME: OK / FAILED lines)");
  c.sub->add_flag("-q,--quiet", args->quiet, "no progress; with --check print only FAILED lines");
  c.sub->add_flag("--status", args->status, "with --check print nothing; the exit code says it");
  c.run = [args] { return args->check.empty() ? run_make(*args) : run_check(*args); };
  return c;
}

}  // namespace ckptcli
