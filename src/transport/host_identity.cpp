#include "transport/host_identity.hpp"

#include <fstream>
#include <string>

#include <sys/stat.h>

#include "core/name_hash.hpp"

namespace hmcast::transport {

std::uint64_t host_identity(const std::string& name) {
  std::string key;
  if (!name.empty()) {
    key = "name:" + name;
  } else {
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    std::getline(boot, boot_id);
    key = "boot:" + boot_id;
    struct stat st {};
    if (::stat("/dev/shm", &st) == 0)
      key += " shm:" + std::to_string(st.st_dev) + "/" + std::to_string(st.st_ino);
    if (::stat("/proc/self/ns/net", &st) == 0) key += " net:" + std::to_string(st.st_ino);
  }
  const std::uint64_t h = name_hash(key);
  return h == 0 ? 1 : h;
}

}  // namespace hmcast::transport
