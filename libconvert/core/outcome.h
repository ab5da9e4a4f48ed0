// The one mapping from a run's outcome to the process exit code (README "Exit codes").
//
// Every library status (ConvertStatus, DiffStatus, CheckStatus, DumpError, MergeStatus,
// RepackStatus, a Findings list) says which Outcome it is with an `outcome_of` declared
// beside it; the apps turn that Outcome into an exit code here and nowhere else, and
// reports name it with outcome_name (the JSON `status` strings).
#pragma once

#include "core/findings.h"

namespace ckpt {

enum class Outcome {
  ok,         // 0: clean / same / pass
  findings,   // 1: errors found in the input, a mismatch, a difference, nothing verifiable
  usage,      // 2: a usage mistake or a refused request (bad flag, an output that is an input)
  io,         // 3: an I/O error (unreadable input, a failed write, a full disk)
  no_device,  // 4: no usable GPU (ckpt-gpu)
};

// 0, 1, 2, 3, 4 as above: documented, scripts depend on them.
int exit_code_for(Outcome o);

// "ok", "input_error", "usage_error", "io_error", "no_device" (convert's JSON `status`).
const char* outcome_name(Outcome o);

// io when any finding is an I/O error, findings when any is an error, else ok.
Outcome outcome_of(const Findings& f);

// The outcome with the larger exit code: how a command combines its run with the writing
// of its output (a clean run whose report cannot be written is an I/O error).
Outcome worse(Outcome a, Outcome b);

}  // namespace ckpt
