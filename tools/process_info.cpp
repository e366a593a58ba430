#include "process_info.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <climits>
#include <stdexcept>

namespace hmcast::tools {

CpuSeconds process_cpu_seconds() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return {};
  const auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return {secs(u.ru_utime), secs(u.ru_stime)};
}

std::string self_exe() {
  std::array<char, PATH_MAX> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) throw std::runtime_error("cannot find this program's path (/proc/self/exe): is /proc mounted?");
  return {buf.data(), static_cast<std::size_t>(n)};
}

}  // namespace hmcast::tools
