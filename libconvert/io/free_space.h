// The one free-space check of the commands that write large outputs (convert, relayout,
// repack-experts): made under the output's lock, before anything is written, so a disk
// that cannot hold the output is said at once (IO_NO_SPACE, exit 3) and not after
// gigabytes. DirectWriter::reserve (io/direct_writer.h) backs it up per file: another
// process may take the space between the check and the writes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ckpt {

// Bytes an unprivileged writer may still use (statvfs f_bavail x f_frsize) on the
// filesystem holding `path`, or its nearest existing parent; UINT64_MAX where statvfs
// cannot tell (nothing is refused on a guess). CKPT_TEST_FREE_BYTES=N makes it N (tests).
uint64_t free_bytes(const std::filesystem::path& path);

// "" when `needed` bytes fit in `free`; else the message of the refusal, which names the
// job (`what`: "the conversion", "the repack"), both sizes and the directory.
std::string no_space_message(std::string_view what, uint64_t needed, const std::string& dir, uint64_t free);

}  // namespace ckpt
