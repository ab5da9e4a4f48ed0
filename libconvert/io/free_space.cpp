#include "io/free_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstdlib>

namespace ckpt {

uint64_t free_bytes(const std::filesystem::path& path) {
  if (const char* v = std::getenv("CKPT_TEST_FREE_BYTES"); v && *v) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (errno == 0 && end && *end == '\0') return n;
  }
  std::filesystem::path probe = path;
  std::error_code ec;
  while (!probe.empty() && !std::filesystem::exists(probe, ec)) probe = probe.parent_path();
  struct statvfs st {};
  if (::statvfs(probe.empty() ? "." : probe.c_str(), &st) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

std::string no_space_message(std::string_view what, uint64_t needed, const std::string& dir, uint64_t free) {
  if (needed <= free) return "";
  return std::string(what) + " needs " + std::to_string(needed) + " bytes but " + dir + " has " +
         std::to_string(free) + " free; nothing was written";
}

}  // namespace ckpt
