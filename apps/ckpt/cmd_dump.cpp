// `ckpt dump` (placeholder until the dequantizer lands).
#include "commands.h"

namespace ckptcli {

Command add_dump_command(CLI::App& app) {
  Command c;
  c.sub = app.add_subcommand("dump", "Write one tensor's values as f32 or raw bytes");
  c.run = [] { return static_cast<int>(kUsage); };
  return c;
}

}  // namespace ckptcli
