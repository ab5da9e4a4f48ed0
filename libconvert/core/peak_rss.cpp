#include "core/peak_rss.h"

#include <sys/resource.h>

namespace ckpt {

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace ckpt
