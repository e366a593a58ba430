// A shm ring's pages are mapped a chunk ahead of its writer (shm/write_ahead.hpp):
// checked with mincore() on a fresh shared file, whose pages exist only once touched.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/shm/write_ahead.hpp"

using hmcast::shm::Ring;
using hmcast::shm::WriteAhead;

namespace {

constexpr std::size_t kPage = 4096;

/// Pages of [p, p + len) resident in memory.
std::size_t resident(const std::byte* p, std::size_t len) {
  std::vector<unsigned char> v((len + kPage - 1) / kPage);
  REQUIRE(::mincore(const_cast<std::byte*>(p), len, v.data()) == 0);
  std::size_t n = 0;
  for (auto c : v) n += c & 1U;
  return n;
}

}  // namespace

TEST_CASE("shm write-ahead: a ring's pages are mapped a chunk ahead of its writer, once", "[shm]") {
  constexpr std::size_t kCap = 1 << 20;
  const int fd = ::memfd_create("hmcast-write-ahead-test", 0);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, kCap) == 0);
  void* m = ::mmap(nullptr, kCap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  REQUIRE(m != MAP_FAILED);
  const Ring ring{static_cast<std::byte*>(m), kCap};
  CHECK(resident(ring.data, kCap) == 0);

  WriteAhead ahead;
  ahead.before_write(ring, 0, 100);
  const std::size_t chunk_pages = WriteAhead::kChunk / kPage;
  CHECK(resident(ring.data, kCap) == chunk_pages);
  // Writes inside what is mapped map nothing more.
  ahead.before_write(ring, 4096, 8192);
  CHECK(resident(ring.data, kCap) == chunk_pages);
  // A write past it maps the next chunk from where the last one ended.
  ahead.before_write(ring, WriteAhead::kChunk - 64, 128);
  CHECK(resident(ring.data, kCap) == 2 * chunk_pages);
  // A record that wraps (padding to the end) means all of the ring is in use.
  ahead.before_write(ring, kCap - 64, 256);
  CHECK(resident(ring.data, kCap) == kCap / kPage);
  // On later laps (absolute positions past the capacity) nothing is left to do.
  ahead.before_write(ring, 3 * kCap + 512, 1024);
  CHECK(resident(ring.data, kCap) == kCap / kPage);

  REQUIRE(::munmap(m, kCap) == 0);
  ::close(fd);
}
