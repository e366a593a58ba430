#include "transport/shm/stale_files.hpp"

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/shm/shm_layout.hpp"

namespace hmcast::shm {

namespace {

/// "hmcast-" 16 hex digits "-" a member id: the names file_name() makes, and no other.
bool is_member_file(std::string_view name) {
  constexpr std::string_view prefix = "hmcast-";
  constexpr std::size_t hex = 16;
  if (name.size() <= prefix.size() + hex + 1 || name.substr(0, prefix.size()) != prefix) return false;
  for (std::size_t i = prefix.size(); i < prefix.size() + hex; ++i)
    if (std::strchr("0123456789abcdef", name[i]) == nullptr) return false;
  if (name[prefix.size() + hex] != '-') return false;
  const auto id = name.substr(prefix.size() + hex + 1);
  if (id.size() > 10) return false;  // a MemberId is 32 bits
  for (const char c : id)
    if (c < '0' || c > '9') return false;
  return true;
}

/// The first words of a member file's Header: what decides whether it is stale.
struct Owner {
  std::uint64_t magic = 0;
  std::uint32_t version = 0;
  std::uint32_t pid = 0;
  std::uint32_t pid_ns = 0;
};

/// Reads them from `name` in `dir`; false when the file cannot be read or is too
/// short to be a member's file.
bool read_owner(int dir, const char* name, Owner& out) {
  const int fd = ::openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  constexpr std::size_t kRead = offsetof(Header, multicast_capacity);  // the words before the capacities
  unsigned char head[kRead];
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                  static_cast<std::uint64_t>(st.st_size) >= sizeof(Header) &&
                  ::pread(fd, head, kRead, 0) == static_cast<ssize_t>(kRead);
  ::close(fd);
  if (!ok) return false;
  std::memcpy(&out.magic, head + offsetof(Header, magic), sizeof out.magic);
  std::memcpy(&out.version, head + offsetof(Header, version), sizeof out.version);
  std::memcpy(&out.pid, head + offsetof(Header, pid), sizeof out.pid);
  std::memcpy(&out.pid_ns, head + offsetof(Header, pid_ns), sizeof out.pid_ns);
  return true;
}

}  // namespace

bool process_alive(std::uint32_t pid) {
  if (pid == 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;  // no /proc: trust kill()
  char stat[256] = {};
  const std::size_t n = std::fread(stat, 1, sizeof stat - 1, f);
  std::fclose(f);
  const char* close_paren = std::strrchr(stat, ')');  // the state follows the command name
  return n == 0 || close_paren == nullptr || close_paren[1] != ' ' || close_paren[2] != 'Z';
}

std::uint32_t pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0 || st.st_ino > 0xFFFF'FFFFULL) return 0;
  return static_cast<std::uint32_t>(st.st_ino);
}

std::size_t remove_stale_files(const char* dir_path) {
  const std::uint32_t ns = pid_namespace();
  if (ns == 0) return 0;  // cannot tell our processes from another namespace's
  const std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(dir_path), ::closedir);
  if (!dir) return 0;
  const auto self = static_cast<std::uint32_t>(::getpid());
  std::size_t removed = 0;
  while (const dirent* e = ::readdir(dir.get())) {
    if (!is_member_file(e->d_name)) continue;
    Owner o;
    if (!read_owner(::dirfd(dir.get()), e->d_name, o)) continue;
    if (o.magic != kMagic || o.version != kVersion || o.pid_ns != ns || o.pid == 0 || o.pid == self ||
        process_alive(o.pid))
      continue;
    // Another member starting now may have removed it first: ENOENT is no failure.
    if (::unlinkat(::dirfd(dir.get()), e->d_name, 0) == 0) ++removed;
  }
  return removed;
}

}  // namespace hmcast::shm
