// The pool of large buffers (transport/buffer_pool.hpp): the verbs transport's registration cache,
// with registration faked: buffers come back registered and are lent again, idle
// memory stays under its bound, closing deregisters everything (lent buffers too),
// and a buffer outliving its pool is still freed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "transport/buffer_pool.hpp"

using hmcast::transport::BufferPool;

namespace {
// A fake device: handles are the registered address, and it remembers what is registered.
struct FakeDevice {
  std::map<const std::byte*, std::size_t> registered;
  int refuse_next = 0;  // registrations to refuse
  int registrations = 0;
  std::shared_ptr<BufferPool> pool(std::size_t max_idle) {
    return std::make_shared<BufferPool>(
        [this](std::byte* data, std::size_t bytes) -> void* {
          if (refuse_next > 0) {
            --refuse_next;
            return nullptr;
          }
          ++registrations;
          registered[data] = bytes;
          return data;
        },
        [this](void* h) { return registered.erase(static_cast<const std::byte*>(h)) == 1; }, max_idle);
  }
};
}  // namespace

TEST_CASE("registered pool: a buffer given back is lent again without registering", "[pool]") {
  FakeDevice dev;
  auto pool = dev.pool(std::size_t{64} << 20);
  auto a = pool->acquire(3U << 20);
  REQUIRE(a->size() == 3U << 20);
  CHECK(std::all_of(a->begin(), a->end(), [](std::byte b) { return b == std::byte{0}; }));
  CHECK(a->capacity() == 4U << 20);  // the size class
  CHECK(pool->handle_of(a->data()) == a->data());
  CHECK(dev.registered.at(a->data()) == 4U << 20);  // the whole capacity is registered
  const std::byte* where = a->data();
  (*a)[5] = std::byte{9};
  a.reset();
  CHECK(pool->stats().idle_bytes == 4U << 20);
  CHECK(pool->stats().lent == 0);

  auto b = pool->acquire((3U << 20) + 100);  // same class
  CHECK(b->data() == where);
  CHECK((*b)[5] == std::byte{9});  // lent again with its old bytes: no zeroing (every byte gets written)
  CHECK(dev.registrations == 1);
  CHECK(pool->stats().reuses == 1);
  auto c = pool->acquire(100);  // another class: a new registration
  CHECK(c->capacity() == BufferPool::capacity_for(100));
  CHECK(c->capacity() == std::size_t{64} << 10);
  CHECK(dev.registrations == 2);
  CHECK(pool->handle_of(reinterpret_cast<const std::byte*>(&dev)) == nullptr);  // not ours
}

TEST_CASE("registered pool: idle memory stays under its bound; the rest is deregistered", "[pool]") {
  FakeDevice dev;
  auto pool = dev.pool(std::size_t{1} << 20);
  auto a = pool->acquire(1U << 20);
  auto b = pool->acquire(1U << 20);
  CHECK(dev.registered.size() == 2);
  a.reset();
  b.reset();  // over the bound: deregistered and freed
  CHECK(pool->stats().idle_bytes == 1U << 20);
  CHECK(dev.registered.size() == 1);
  CHECK(pool->stats().deregistrations == 1);
}

TEST_CASE("registered pool: a refused registration lends plain memory, never kept", "[pool]") {
  FakeDevice dev;
  dev.refuse_next = 1;
  auto pool = dev.pool(std::size_t{64} << 20);
  auto a = pool->acquire(1000);
  REQUIRE(a->size() == 1000);
  CHECK(pool->handle_of(a->data()) == nullptr);
  CHECK(pool->stats().register_failed == 1);
  a.reset();
  CHECK(pool->stats().idle_bytes == 0);
}

TEST_CASE("registered pool: close deregisters lent and idle buffers; they outlive the pool", "[pool]") {
  FakeDevice dev;
  auto pool = dev.pool(std::size_t{64} << 20);
  auto lent = pool->acquire(1U << 20);
  pool->acquire(1U << 20).reset();  // one idle
  CHECK(dev.registered.size() == 2);
  pool->close();
  CHECK(dev.registered.empty());
  CHECK(pool->handle_of(lent->data()) == nullptr);
  auto after = pool->acquire(10);  // closed: plain memory, nothing registered
  CHECK(dev.registered.empty());
  CHECK(pool->handle_of(after->data()) == nullptr);
  (*lent)[0] = std::byte{1};  // still valid memory
  pool.reset();               // the pool goes first
  lent.reset();               // and the buffer is still freed (ASan checks)
  after.reset();
}

TEST_CASE("registered pool: buffers dropped on other threads come back", "[pool]") {
  FakeDevice dev;
  auto pool = dev.pool(std::size_t{64} << 20);
  std::vector<std::shared_ptr<std::vector<std::byte>>> bufs;
  for (int i = 0; i < 8; ++i) bufs.push_back(pool->acquire(std::size_t{64} << 10));
  std::vector<std::thread> threads;
  for (auto& b : bufs) threads.emplace_back([b = std::move(b)]() mutable { b.reset(); });
  for (auto& t : threads) t.join();
  CHECK(pool->stats().lent == 0);
  CHECK(pool->stats().idle_bytes == 8 * (std::size_t{64} << 10));
  for (int i = 0; i < 8; ++i) bufs[static_cast<std::size_t>(i)] = pool->acquire(std::size_t{64} << 10);
  CHECK(dev.registrations == 8);
  CHECK(pool->stats().reuses == 8);
}

TEST_CASE("buffer pool: a pool that registers nothing keeps what comes back, within its bound", "[pool]") {
  auto pool = std::make_shared<BufferPool>(std::size_t{8} << 20);
  auto a = pool->acquire(5U << 20);  // class 8 MiB
  const std::byte* where = a->data();
  a.reset();
  CHECK(pool->stats().idle_bytes == 8U << 20);
  auto b = pool->acquire(6U << 20);
  CHECK(b->data() == where);  // the same memory: no new allocation, no page faults
  CHECK(b->size() == 6U << 20);
  CHECK(pool->stats().reuses == 1);
  CHECK(pool->stats().registrations == 0);
  CHECK(pool->handle_of(b->data()) == nullptr);  // nothing registered
  auto c = pool->acquire(6U << 20);  // another of the class while b is out
  CHECK(c->data() != where);
  b.reset();
  c.reset();  // over the bound: the second one is freed, not kept
  CHECK(pool->stats().idle_bytes == 8U << 20);
}
