#include "transport/buffer_pool.hpp"

#include <algorithm>
#include <bit>
#include <utility>

namespace hmcast::transport {

namespace {
constexpr std::size_t kSmallestClass = std::size_t{64} << 10;
}

BufferPool::BufferPool(RegisterFn reg, DeregisterFn dereg, std::size_t max_idle_bytes)
    : register_(std::move(reg)), deregister_(std::move(dereg)), max_idle_bytes_(max_idle_bytes) {}

BufferPool::~BufferPool() { close(); }

std::size_t BufferPool::capacity_for(std::size_t size) { return std::bit_ceil(std::max(size, kSmallestClass)); }

std::shared_ptr<std::vector<std::byte>> BufferPool::acquire(std::size_t size) {
  const std::size_t capacity = capacity_for(size);
  std::unique_ptr<std::vector<std::byte>> buffer;
  void* handle = nullptr;
  bool closed = false;
  {
    std::lock_guard lock(mu_);
    closed = closed_;
    if (auto it = idle_.find(capacity); it != idle_.end()) {
      buffer = std::move(it->second.buffer);
      handle = it->second.handle;
      idle_.erase(it);
      stats_.idle_bytes -= capacity;
      ++stats_.reuses;
    }
  }
  if (!buffer) {
    buffer = std::make_unique<std::vector<std::byte>>();
    buffer->reserve(capacity);
    if (register_) {
      // Registered outside the lock: it is slow (pins pages), and nothing else here
      // knows of this buffer yet.
      handle = closed ? nullptr : register_(buffer->data(), capacity);
      std::lock_guard lock(mu_);
      ++(handle != nullptr ? stats_.registrations : stats_.register_failed);
      if (closed_ && handle != nullptr) {  // closed meanwhile: nothing may stay registered
        (void)deregister_counted(handle);
        handle = nullptr;
      }
    }
  }
  // Within capacity: data() does not move. Only bytes past the old size are zeroed
  // (a fresh buffer's first use); a buffer lent again keeps its old bytes.
  buffer->resize(size);
  std::vector<std::byte>* raw = buffer.release();
  {
    std::lock_guard lock(mu_);
    lent_[raw->data()] = handle;
    ++stats_.lent;
  }
  std::weak_ptr<BufferPool> pool = weak_from_this();
  return {raw, [pool](std::vector<std::byte>* b) {
            if (auto p = pool.lock()) p->give_back(b);
            else delete b;  // NOLINT(cppcoreguidelines-owning-memory): the pool closed and went away
          }};
}

void* BufferPool::handle_of(const std::byte* data) const {
  std::lock_guard lock(mu_);
  auto it = lent_.find(data);
  return it == lent_.end() ? nullptr : it->second;
}

void BufferPool::give_back(std::vector<std::byte>* raw) {
  std::unique_ptr<std::vector<std::byte>> buffer(raw);
  std::lock_guard lock(mu_);
  auto it = lent_.find(buffer->data());
  if (it == lent_.end()) return;  // not ours (cannot happen): just free it
  Entry e{std::move(buffer), it->second};
  lent_.erase(it);
  --stats_.lent;
  const std::size_t capacity = e.buffer->capacity();
  // A registering pool keeps only registered buffers (a refused registration may be
  // granted next time); one that registers nothing keeps them all.
  const bool usable = !register_ || e.handle != nullptr;
  if (!closed_ && usable && stats_.idle_bytes + capacity <= max_idle_bytes_) {
    stats_.idle_bytes += capacity;
    idle_.emplace(capacity, std::move(e));
    return;
  }
  release_entry(e);
}

void BufferPool::release_entry(Entry& e) {
  if (e.handle == nullptr) return;  // unregistered: the unique_ptr frees it
  // Still registered if that failed: a stray write could land in it, so it is never reused.
  if (!deregister_counted(e.handle)) kept_.push_back(std::move(e.buffer));
  e.handle = nullptr;
}

void BufferPool::close() {
  std::lock_guard lock(mu_);
  if (closed_) return;
  closed_ = true;
  for (auto& [capacity, e] : idle_) release_entry(e);
  idle_.clear();
  stats_.idle_bytes = 0;
  for (auto& [data, handle] : lent_) {
    // On failure the holder's memory is still freed when dropped: a leak of pins only.
    if (handle != nullptr) (void)deregister_counted(handle);
    handle = nullptr;
  }
}

bool BufferPool::deregister_counted(void* handle) {
  const bool ok = deregister_(handle);
  ++(ok ? stats_.deregistrations : stats_.deregister_failed);
  return ok;
}

BufferPool::Stats BufferPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace hmcast::transport
