#include "transport/shm/shared_file.hpp"

#include <cerrno>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "transport/socket/net_util.hpp"

namespace hmcast::shm {

namespace {

std::string errno_text(const std::string& what, const std::string& name, int err) {
  return what + " " + name + ": " + std::strerror(err);
}

/// Maps `fd` (closed here) of `size` bytes; nullptr and errno on failure.
std::byte* map_fd(int fd, std::size_t size) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  errno = err;
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

}  // namespace

SharedFile SharedFile::create(const std::string& name, std::size_t size) {
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {  // a previous process of that id died without removing it
    ::shm_unlink(name.c_str());
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0)
    throw socket::TransportError(errno, errno_text("shared memory: cannot create", name, errno) +
                                            " (is /dev/shm mounted and writable?)");
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw socket::TransportError(err, errno_text("shared memory: cannot size", name, err) +
                                          " (is /dev/shm full? lower ShmOptions' ring sizes)");
  }
  SharedFile f;
  f.base_ = map_fd(fd, size);
  if (f.base_ == nullptr) {
    const int err = errno;
    ::shm_unlink(name.c_str());
    throw socket::TransportError(err, errno_text("shared memory: cannot map", name, err));
  }
  f.name_ = name;
  f.size_ = size;
  f.owner_ = true;
  return f;
}

SharedFile SharedFile::open(const std::string& name) {
  SharedFile f;
  f.name_ = name;
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    f.error_ = errno_text("cannot open", name, errno) + " (does the member run on this host?)";
    return f;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    f.error_ = "cannot size " + name;
    ::close(fd);
    return f;
  }
  f.size_ = static_cast<std::size_t>(st.st_size);
  f.base_ = map_fd(fd, f.size_);
  if (f.base_ == nullptr) f.error_ = errno_text("cannot map", name, errno);
  return f;
}

SharedFile::~SharedFile() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

SharedFile::SharedFile(SharedFile&& other) noexcept { *this = std::move(other); }

SharedFile& SharedFile::operator=(SharedFile&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, size_);
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
    error_ = std::move(other.error_);
  }
  return *this;
}

void SharedFile::unlink() {
  if (owner_) ::shm_unlink(name_.c_str());
  owner_ = false;
}

void futex_wait(const void* word, std::uint32_t expected, std::int64_t timeout_ns) {
  timespec ts{};
  timespec* tp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000);
    tp = &ts;
  }
  // Not FUTEX_PRIVATE: the word is shared with other processes. EAGAIN (the word
  // changed), EINTR and ETIMEDOUT all mean "look again".
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, tp, nullptr, 0);
}

void futex_wake(const void* word) { ::syscall(SYS_futex, word, FUTEX_WAKE, 1, nullptr, nullptr, 0); }

}  // namespace hmcast::shm
