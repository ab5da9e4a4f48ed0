// Writing outputs safely: a sibling temporary name, fsync, rename, fsync of the
// directory. An interrupted run never leaves a partial file at the final name.
#pragma once

#include <string>
#include <string_view>

namespace ckpt {

bool write_file_atomic(const std::string& path, std::string_view content, std::string& error);
// fsyncs the directory holding `path` so a completed rename survives a crash.
bool fsync_parent_dir(const std::string& path, std::string& error);

}  // namespace ckpt
