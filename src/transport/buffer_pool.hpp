// Final buffers for large messages, kept between messages: every transport's
// large buffers come from one (a fresh buffer costs a page fault per page and
// zeroing, which at tens of MiB per message is as much as moving the bytes), and for
// the verbs transport, which peers RDMA WRITE into, it is also the registration
// cache. Contents of a buffer lent again are unspecified: every byte of a large
// message is written before it is delivered, so nothing is zeroed.
//
// Registering memory (ibv_reg_mr) pins its pages and costs a system call per page
// range; doing it for every large message at every receiver is the cost a
// registration cache removes. A cache keyed by address is unsafe with the heap:
// memory freed while registered can be unmapped and a later allocation mapped at the
// same address gets other pages, so the cached registration would point at the old
// ones (the classic stale-registration bug). So this cache owns its memory instead:
// acquire() lends a buffer whose registration outlives the message, and the last
// reference to it gives it back, registered, for the next one.
//
// Safety rests on who may still write into a buffer given back: nobody. The verbs
// endpoint holds a reference to every buffer it advertised to peers until each of
// them confirmed it stopped writing (region_ledger.hpp), so a buffer only comes back
// here once no correct peer holds a descriptor for it.
//
// Memory stays bounded: idle buffers are kept up to `max_idle_bytes`, the rest is
// deregistered and freed. No verbs calls here (register/deregister are injected, or
// left out for transports that register nothing), so it is unit-tested on any host;
// the buffers it lends may be dropped on any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace hmcast::transport {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  /// Registers [data, data + bytes); returns its handle (e.g. ibv_mr*), or nullptr
  /// if the device refused (the buffer is then lent unregistered, and not kept).
  /// Left empty: a pool that registers nothing and keeps every buffer given back.
  using RegisterFn = std::function<void*(std::byte* data, std::size_t bytes)>;
  /// Deregisters a handle; false if that failed (the memory is then never freed).
  using DeregisterFn = std::function<bool(void* handle)>;

  struct Stats {
    std::uint64_t registrations = 0;      // buffers registered
    std::uint64_t reuses = 0;             // buffers lent again, already registered (cache hits)
    std::uint64_t register_failed = 0;    // registrations refused: lent unregistered
    std::uint64_t deregistrations = 0;    // registrations released (over the idle bound, or close())
    std::uint64_t deregister_failed = 0;  // ... that failed: that memory is kept forever
    std::uint64_t lent = 0;               // buffers out now
    std::uint64_t idle_bytes = 0;         // registered bytes kept for reuse now
  };

  /// Use std::make_shared<BufferPool>: buffers given back find the pool through it.
  BufferPool(RegisterFn reg, DeregisterFn dereg, std::size_t max_idle_bytes);
  /// A pool that registers nothing.
  explicit BufferPool(std::size_t max_idle_bytes) : BufferPool(nullptr, nullptr, max_idle_bytes) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// A buffer of exactly `size` bytes, registered if the pool registers and the
  /// device allows; a buffer lent again keeps old bytes. Its capacity is a size class
  /// (a power of two of at least 64 KiB), so buffers of near sizes share
  /// registrations. The last reference gives it back.
  std::shared_ptr<std::vector<std::byte>> acquire(std::size_t size);
  /// The registration handle of a buffer this pool lent (`data` its data()), or
  /// nullptr: not ours, or lent unregistered, or the pool is closed.
  [[nodiscard]] void* handle_of(const std::byte* data) const;
  /// Deregister everything (a registering pool), lent buffers included (the caller guarantees nothing
  /// can write into them any more: every queue pair is gone). Buffers given back
  /// later are simply freed.
  void close();
  [[nodiscard]] Stats stats() const;

  /// The size class of a buffer of `size` bytes.
  static std::size_t capacity_for(std::size_t size);

 private:
  struct Entry {
    std::unique_ptr<std::vector<std::byte>> buffer;  // capacity == the class
    void* handle = nullptr;
  };
  void give_back(std::vector<std::byte>* buffer);
  void release_entry(Entry& e);  // with mu_ held
  bool deregister_counted(void* handle);  // with mu_ held; counts the outcome

  RegisterFn register_;
  DeregisterFn deregister_;
  std::size_t max_idle_bytes_;
  mutable std::mutex mu_;
  bool closed_ = false;
  std::multimap<std::size_t, Entry> idle_;  // by capacity; owned here
  // Lent buffers, by data(): their handle only. The memory belongs to the shared_ptr
  // that was lent (its deleter gives it back, or frees it if the pool is gone).
  std::map<const std::byte*, void*> lent_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> kept_;  // deregistration failed: never freed
  Stats stats_;
};

}  // namespace hmcast::transport
