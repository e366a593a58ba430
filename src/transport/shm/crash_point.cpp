#include "transport/shm/crash_point.hpp"

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <ctime>

#include <signal.h>
#include <unistd.h>

namespace hmcast::shm {

namespace {

// Set from a signal handler: plain lock-free atomics only.
std::atomic<int> g_report_fd{-1};
std::atomic<std::size_t> g_min_frame{0};  // 0: not armed
std::atomic<std::size_t> g_min_offset{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<std::size_t>::is_always_lock_free);

}  // namespace

void arm_crash_mid_write(int report_fd, std::size_t min_frame, std::size_t min_offset) noexcept {
  g_report_fd.store(report_fd, std::memory_order_relaxed);
  g_min_offset.store(min_offset, std::memory_order_relaxed);
  g_min_frame.store(min_frame == 0 ? 1 : min_frame, std::memory_order_release);
}

bool crash_due(std::size_t frame_size, std::size_t offset) noexcept {
  const std::size_t min = g_min_frame.load(std::memory_order_acquire);
  return min != 0 && frame_size >= min && offset >= g_min_offset.load(std::memory_order_relaxed);
}

void crash_mid_write(std::uint32_t to, std::size_t frame_size, std::size_t offset, std::size_t length,
                     std::size_t copied) noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // the clock tools' mono_ns() reads
  const std::int64_t t_ns = static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  char line[256];
  const int n = std::snprintf(line, sizeof line,
                              "{\"event\":\"crashed_mid_write\",\"t_ns\":%" PRId64
                              ",\"ring\":\"%s\",\"to\":%u,\"frame_bytes\":%zu,\"frame_offset\":%zu,\"record_bytes\":%zu,"
                              "\"record_copied\":%zu}\n",
                              t_ns, to == 0 ? "multicast log" : "inbox", to, frame_size, offset, length, copied);
  const int fd = g_report_fd.load(std::memory_order_relaxed);
  if (fd >= 0 && n > 0) {
    [[maybe_unused]] const ssize_t w = ::write(fd, line, static_cast<std::size_t>(n));
  }
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();  // SIGKILL cannot be caught; the kernel takes the process
}

}  // namespace hmcast::shm
