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

#include "../cli_common.h"
#include "commands.h"
#include "hashman/check.h"
#include "hashman/manifest.h"
#include "io/atomic_file.h"
#include "io/input_file.h"

namespace ckptcli {
namespace {

constexpr const char* kHash = "ckpt hash";

struct HashArgs {
  std::string path, algo = "xxh3", out, check;
  bool dequant = false, status = false, no_file_hashes = false;
  CommonFlags c;
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

ckpt::Outcome failed(const ckpt::Findings& f) {
  print_findings(kHash, f, ckpt::Severity::error);
  const ckpt::Outcome o = ckpt::outcome_of(f);
  return o == ckpt::Outcome::ok ? ckpt::Outcome::io : o;
}

ckpt::Outcome run_make(const HashArgs& a) {
  const std::string target = a.out.empty() ? "-" : a.out;
  ckpt::InputSet inputs;
  inputs.add_checkpoint(a.path);
  if (auto o = check_outputs(kHash, inputs, {target}); o != ckpt::Outcome::ok) return o;
  ckpt::HashSource src;
  ckpt::Findings f;
  if (!ckpt::open_hash_source(a.path, src, f)) return failed(f);
  ckpt::HashOptions o;
  o.algos.xxh3 = a.algo != "sha256";
  o.algos.sha256 = a.algo != "xxh3";
  o.dequant = a.dequant;
  o.file_hashes = !a.no_file_hashes;
  ckpt::Progress progress(a.c.mode(), "hash");
  progress.set_total(total_file_bytes(src.view));
  o.on_progress = [&](uint64_t n) { progress.add(n); };
  ckpt::HashManifest m;
  if (!ckpt::build_hash_manifest(src, o, m, f)) {
    print_findings(kHash, f, ckpt::Severity::error);
    return ckpt::Outcome::io;
  }
  progress.finish();
  return emit(kHash, target, ckpt::hash_manifest_json(m), inputs);
}

ckpt::Outcome run_check(const HashArgs& a) {
  // One input open (io/input_file.h): a FIFO or device is refused unread, and a manifest
  // larger than the parser's limit is refused unread.
  std::string text;
  ckpt::IoError err;
  if (!ckpt::read_input_file(a.check, ckpt::kMaxHashManifestBytes, text, err)) {
    print_error(kHash, "IO_READ", a.check, "cannot read the manifest: " + err.message);
    return ckpt::Outcome::io;
  }
  ckpt::HashManifest expected;
  ckpt::Findings pf;
  if (!ckpt::parse_hash_manifest(text, a.check, expected, pf)) {
    print_findings(kHash, pf, ckpt::Severity::error);
    return ckpt::Outcome::findings;
  }
  ckpt::HashOptions o;
  auto progress = std::make_shared<ckpt::Progress>(a.status ? ckpt::ProgressMode::off : a.c.mode(), "hash --check");
  o.on_progress = [progress](uint64_t n) { progress->add(n); };
  ckpt::CheckResult r = ckpt::check_hash_manifest(expected, a.path, o);
  progress.reset();
  if (r.status == ckpt::CheckStatus::io_error || r.status == ckpt::CheckStatus::bad_input)
    print_findings(kHash, r.findings, ckpt::Severity::error);
  if (!a.status) {
    std::cout << ckpt::check_lines_text(r, a.c.quiet) << std::flush;
    if (r.checked && (r.failed || !a.c.quiet)) std::cerr << ckpt::check_summary_text(r);
  }
  return ckpt::outcome_of(r.status);
}

}  // namespace

Command add_hash_command(CLI::App& app) {
  auto args = std::make_shared<HashArgs>();
  Command c;
  c.name = kHash;
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
  c.sub->add_option("-o,--output", args->out,
                    "write the manifest to FILE atomically, or - for stdout (the default); never over an input");
  c.sub->add_option("-c,--check", args->check, "check PATH against this manifest (NAME: OK / FAILED lines)");
  add_common(c.sub, args->c, "errors only: no progress; with --check print only FAILED lines");
  c.sub->add_flag("--status", args->status, "with --check print nothing; the exit code says it");
  c.run = [args] { return args->check.empty() ? run_make(*args) : run_check(*args); };
  return c;
}

}  // namespace ckptcli
