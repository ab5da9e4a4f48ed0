// `ckpt hash --check MANIFEST PATH`: hashes PATH with the manifest's algorithms (and
// dequant setting) and compares, file by file and tensor by tensor, in the coreutils
// `-c` style: one `NAME: OK` / `NAME: FAILED` line each, then a summary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/findings.h"
#include "core/outcome.h"
#include "hashman/manifest.h"

namespace ckpt {

struct CheckLine {
  std::string name;
  bool ok = true;
  std::string why;  // for FAILED: "hash", "missing", "not in manifest", "shape [2,3] -> [3,2]", ...
};

enum class CheckStatus { ok, mismatch, io_error, bad_input };
// What a status means for the exit code (core/outcome.h): a mismatch and a bad input are 1.
inline Outcome outcome_of(CheckStatus s) {
  static constexpr Outcome kOutcome[] = {Outcome::ok, Outcome::findings, Outcome::io, Outcome::findings};
  return kOutcome[static_cast<int>(s)];
}

struct CheckResult {
  CheckStatus status = CheckStatus::ok;
  std::vector<CheckLine> files, tensors;
  CheckLine model;  // the whole-model hash line
  uint64_t failed = 0, checked = 0;
  uint64_t unreadable = 0;  // listed files that are gone (or unreadable): FAILED (open or read)
  Findings findings;  // why PATH could not be read (io_error / bad_input)
};

// Compares an already-built manifest of the checkpoint against the expected one.
CheckResult compare_manifests(const HashManifest& expected, const HashManifest& actual);

// Opens and hashes `path`, then compare_manifests.
CheckResult check_hash_manifest(const HashManifest& expected, const std::string& path, const HashOptions& progress_only);

// "NAME: OK" / "NAME: FAILED" / "NAME: FAILED (why)" lines, files, then tensors, then the model.
std::string check_lines_text(const CheckResult& r, bool quiet);
// "ckpt hash: WARNING: 2 of 131 computed checksums did NOT match" (or "all N OK"), after
// coreutils' "WARNING: 1 listed file could not be read" when a listed file is gone.
std::string check_summary_text(const CheckResult& r);

}  // namespace ckpt
