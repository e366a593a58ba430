#include "transport/shm/write_ahead.hpp"

#include <sys/mman.h>

#include <algorithm>

#include "core/assert.hpp"

namespace hmcast::shm {

void WriteAhead::map_to(const Ring& ring, std::uint64_t end) {
  constexpr std::uint64_t kPage = 4096;
  HMCAST_ASSERT(reinterpret_cast<std::uintptr_t>(ring.data) % kPage == 0);  // rings start on a page
  const std::uint64_t from = mapped_ / kPage * kPage;
  const std::uint64_t to = std::min(ring.capacity, std::max(end, mapped_ + kChunk));
  const std::uint64_t len = (to - from + kPage - 1) / kPage * kPage;  // the file holds whole pages
  // A kernel without MADV_POPULATE_WRITE (before 5.14) or a refusal leaves the pages
  // to fault in one by one, as before: nothing is lost but the time.
  if (::madvise(ring.data + from, len, MADV_POPULATE_WRITE) != 0) {
    mapped_ = ring.capacity;
    return;
  }
  mapped_ = to;
}

}  // namespace hmcast::shm
