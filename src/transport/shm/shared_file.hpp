// A file in shared memory (POSIX shm_open, /dev/shm) mapped into this process:
// the one the owner creates, or one a peer created and this process opens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hmcast::shm {

class SharedFile {
 public:
  SharedFile() = default;
  /// Creates `name` (replacing a stale file of that name, left by a process that
  /// died) of `size` bytes, zero-filled, and maps it. Throws socket::TransportError.
  static SharedFile create(const std::string& name, std::size_t size);
  /// Maps an existing file; `ok()` is false (and `error()` says why) when it cannot.
  static SharedFile open(const std::string& name);
  ~SharedFile();
  SharedFile(SharedFile&& other) noexcept;
  SharedFile& operator=(SharedFile&& other) noexcept;
  SharedFile(const SharedFile&) = delete;
  SharedFile& operator=(const SharedFile&) = delete;

  [[nodiscard]] bool ok() const { return base_ != nullptr; }
  [[nodiscard]] std::byte* base() const { return base_; }
  [[nodiscard]] std::size_t size() const { return size_; }
  [[nodiscard]] const std::string& error() const { return error_; }
  /// Removes the name (the mapping stays until destruction). Idempotent.
  void unlink();

 private:
  std::string name_;
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  bool owner_ = false;
  std::string error_;
};

/// Sleeps while `*word == expected`, for at most `timeout_ns` (negative: no limit);
/// the word may live in memory other processes share.
void futex_wait(const void* word, std::uint32_t expected, std::int64_t timeout_ns);
/// Wakes one sleeper on `word`.
void futex_wake(const void* word);

}  // namespace hmcast::shm
