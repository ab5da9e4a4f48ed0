// A directory's files with their bytes, for the tests that compare whole outputs (a
// conversion made twice, resumed, partitioned, written through another writer).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "test_util.h"

namespace ckpt::test {

// What a tree leaves out: only the .ckptkit/ bookkeeping (its records hold times and the
// partition that wrote them), or every hidden file and directory (names starting with '.').
enum class TreeSkips { bookkeeping, hidden };

// Every regular file under `dir`, relative path -> bytes; empty when `dir` does not exist.
inline std::map<std::string, std::vector<uint8_t>> file_tree(const std::string& dir,
                                                             TreeSkips skips = TreeSkips::bookkeeping) {
  namespace fs = std::filesystem;
  std::map<std::string, std::vector<uint8_t>> files;
  if (!fs::exists(dir)) return files;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (skips == TreeSkips::bookkeeping ? name == ".ckptkit" : name[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files[it->path().lexically_relative(dir).string()] = read_file(it->path().string());
  }
  return files;
}

}  // namespace ckpt::test
