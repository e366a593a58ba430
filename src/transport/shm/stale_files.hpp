// Shared-memory files whose owner died with the rest of its group. A member's file
// is unlinked by the member as it closes, or by a survivor that sees it die; when
// every process of a group is killed at once (SIGKILL, the OOM killer, a crashed
// job) nobody is left to do it, and each file keeps its memory (megabytes of
// /dev/shm, which is RAM) until the host reboots. So a member that starts removes
// the files it can prove dead: our magic and version, a process of our own pid
// namespace (a pid names nothing in another), and that process gone.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hmcast::shm {

/// False once process `pid` has exited, also while it is a zombie its parent has
/// not reaped yet (it will never read or write again). 0 counts as alive (unknown).
bool process_alive(std::uint32_t pid);

/// This process's pid namespace (the inode of /proc/self/ns/pid, which the kernel
/// numbers below 2^32); 0 when it cannot be read.
std::uint32_t pid_namespace();

/// Where shm_open() keeps its files (glibc).
inline constexpr const char* kShmDir = "/dev/shm";

/// Unlinks every member file in `dir` (names as shm_transport's file_name()) whose
/// header says its process, of this pid namespace, is gone. Files of live
/// processes, of other namespaces or versions, half-made ones (no magic yet) and
/// files this process may not open are left. Returns how many it removed.
std::size_t remove_stale_files(const char* dir = kShmDir);

}  // namespace hmcast::shm
