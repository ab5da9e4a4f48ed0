// What the binaries were built from: the release version and the git commit.
// Reports (--json) and --version name both; converted outputs, their shard records and
// expert-pack manifests carry only kVersion, so a rebuild from another commit neither
// changes golden manifests nor invalidates an output's --resume identity.
#pragma once

#include <string>

namespace ckpt {

inline constexpr const char* kVersion = CKPT_VERSION;

// The short git hash of the source tree at build time, "-dirty" appended when tracked files
// differed from it, or "unknown" (built from a tarball, or without git).
const char* build_commit();

// "0.1.0 (commit 1a2b3c4d5e6f)": the --version text after the program name.
inline std::string version_text() { return std::string(kVersion) + " (commit " + build_commit() + ")"; }

}  // namespace ckpt
