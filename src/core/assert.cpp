#include "core/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace hmcast::detail {

void assertion_failed(const char* what, const char* file, int line) noexcept {
  std::fprintf(stderr, "hmcast: assertion failed: %s (%s:%d)\n", what, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace hmcast::detail
