// The process's peak resident memory, as the reports print it (convert's result, verify's
// summary, ckpt-gpu verify --stats). Measured, so it differs from run to run.
#pragma once

#include <cstdint>

namespace ckpt {

// getrusage(RUSAGE_SELF) ru_maxrss in bytes (Linux reports KiB); 0 if the call fails.
uint64_t peak_rss_bytes();

}  // namespace ckpt
