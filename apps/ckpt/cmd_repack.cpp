// `ckpt repack-experts` (placeholder until the repacker lands).
#include "commands.h"

namespace ckptcli {

Command add_repack_command(CLI::App& app) {
  Command c;
  c.sub = app.add_subcommand("repack-experts", "Repack GGUF MoE experts into aligned per-expert blobs");
  c.run = [] { return static_cast<int>(kUsage); };
  return c;
}

}  // namespace ckptcli
