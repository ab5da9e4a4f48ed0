// Subcommands that live in their own files register here; main.cpp runs the one chosen.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace ckptcli {

// Documented in the README; scripts depend on them.
enum ExitCode : int { kOk = 0, kFindings = 1, kUsage = 2, kIoError = 3 };

struct Command {
  CLI::App* sub = nullptr;
  std::function<int()> run;  // called after parsing when `sub` was chosen
};

Command add_dump_command(CLI::App& app);    // apps/ckpt/cmd_dump.cpp
Command add_repack_command(CLI::App& app);  // apps/ckpt/cmd_repack.cpp
Command add_hash_command(CLI::App& app);    // apps/ckpt/cmd_hash.cpp
Command add_diff_command(CLI::App& app);    // apps/ckpt/cmd_diff.cpp

}  // namespace ckptcli
