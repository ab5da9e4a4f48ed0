// The layering rule of libconvert/LAYERS: a file includes headers of its own folder and of
// folders on lower lines only. A new include that points up (or sideways, to a peer) fails
// here with the file and the include named, so the folders stay a DAG that follows the
// data flow.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ckpt {
namespace {

namespace fs = std::filesystem;

const fs::path kLib = fs::path(CKPT_SOURCE_DIR) / "libconvert";

// Folder -> line number (0 = bottom), from LAYERS.
std::map<std::string, int> read_layers() {
  std::map<std::string, int> rank;
  std::ifstream in(kLib / "LAYERS");
  std::string line;
  int level = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string folder;
    while (words >> folder) rank[folder] = level;
    ++level;
  }
  return rank;
}

// Every `#include "FOLDER/..."` of a file (quoted includes only: system headers have no folder).
std::vector<std::string> included_folders(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    // `#include "FOLDER/..."`, spaces allowed around '#' (std::regex trips gcc 12's
    // -Wmaybe-uninitialized under the sanitizers, so this is parsed by hand).
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos || line[i] != '#') continue;
    i = line.find_first_not_of(" \t", i + 1);
    if (i == std::string::npos || line.compare(i, 7, "include") != 0) continue;
    i = line.find_first_not_of(" \t", i + 7);
    if (i == std::string::npos || line[i] != '"') continue;
    size_t slash = line.find('/', i + 1);
    size_t quote = line.find('"', i + 1);
    if (slash == std::string::npos || slash > quote) continue;
    out.push_back(line.substr(i + 1, slash - i - 1));
  }
  return out;
}

// Violations of the rule in `root` (one line each), given the layer ranks.
std::vector<std::string> violations(const fs::path& root, const std::map<std::string, int>& rank) {
  std::vector<std::string> bad;
  for (const auto& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    const std::string folder = dir.path().filename().string();
    auto own = rank.find(folder);
    if (own == rank.end()) {
      bad.push_back(folder + "/ is not listed in LAYERS");
      continue;
    }
    for (const auto& f : fs::recursive_directory_iterator(dir.path())) {
      if (!f.is_regular_file()) continue;
      for (const std::string& target : included_folders(f.path())) {
        if (target == folder) continue;
        auto it = rank.find(target);
        if (it == rank.end() || it->second >= own->second)
          bad.push_back(fs::relative(f.path(), root).string() + " includes " + target + "/ (" +
                        (it == rank.end() ? std::string("not a libconvert folder")
                         : it->second == own->second ? std::string("a peer on the same line")
                                                     : std::string("a higher layer")) +
                        ")");
      }
    }
  }
  return bad;
}

TEST(Layers, EveryFolderIsListedOnce) {
  auto rank = read_layers();
  ASSERT_FALSE(rank.empty()) << "cannot read " << (kLib / "LAYERS");
  for (const auto& dir : fs::directory_iterator(kLib))
    if (dir.is_directory()) {
      EXPECT_TRUE(rank.count(dir.path().filename().string())) << dir.path();
    }
}

TEST(Layers, NoFileIncludesAFolderAboveOrBesideItsOwn) {
  auto rank = read_layers();
  ASSERT_FALSE(rank.empty());
  std::string all;
  for (const auto& v : violations(kLib, rank)) all += v + "\n";
  EXPECT_TRUE(all.empty()) << all;
}

// The check itself can fail: a tree with an upward include is reported.
TEST(Layers, AnUpwardIncludeIsReported) {
  fs::path tmp = fs::temp_directory_path() / ("ckpt-layers-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(tmp);
  fs::create_directories(tmp / "core");
  fs::create_directories(tmp / "report");
  std::ofstream(tmp / "core" / "a.h") << "#include \"report/b.h\"\n";
  std::ofstream(tmp / "report" / "b.h") << "#include \"core/a.h\"\n";
  auto bad = violations(tmp, {{"core", 0}, {"report", 1}});
  fs::remove_all(tmp);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("core/a.h includes report/"), std::string::npos) << bad[0];
}

}  // namespace
}  // namespace ckpt
