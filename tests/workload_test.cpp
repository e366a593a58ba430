// The test harness's message bodies (tools/workload.cpp): what `hmcast soak`, `bench`
// and `member` judge deliveries by, so a check that passed everything would hide
// every corruption the transports could cause.
#include <catch2/catch.hpp>

#include <cstddef>
#include <span>
#include <vector>

#include "workload.hpp"

using namespace hmcast;
using namespace hmcast::tools;

namespace {

std::vector<std::byte> made(std::size_t size, MemberId sender, std::uint32_t index) {
  std::vector<std::byte> m(size);
  fill_message(m, 7, sender, index, 0);
  return m;
}

bool intact(const std::vector<std::byte>& m, MemberId sender, Verify v) {
  const auto c = check_message(7, sender, m, v);
  REQUIRE(c);
  return c->intact;
}

}  // namespace

TEST_CASE("workload: a body checks as made, and any changed byte fails the full check", "[workload]") {
  for (std::size_t size : {8UL, 9UL, 15UL, 16UL, 100UL, 2048UL, 2051UL, 65541UL}) {
    const auto m = made(size, 1, 3);
    CHECK(intact(m, 1, Verify::full));
    CHECK(intact(m, 1, Verify::sampled));
    const auto c = check_message(7, 1, m, Verify::full);
    CHECK(c->index == 3);
    CHECK(c->attempt == 0);
    // Every byte after the header, one at a time (every 97th in the large body).
    const std::size_t stride = size > 4096 ? 97 : 1;
    for (std::size_t pos = kMessageHeader; pos < size; pos += stride) {
      auto x = m;
      x[pos] ^= std::byte{0x10};
      INFO("size " << size << ", byte " << pos);
      CHECK_FALSE(intact(x, 1, Verify::full));
    }
  }
}

TEST_CASE("workload: the sampled check catches another message's body, a shifted body and the tail", "[workload]") {
  for (std::size_t size : {100UL, 2051UL, 65541UL}) {
    INFO("size " << size);
    const auto m = made(size, 1, 3);
    // The body of another index (a stale buffer) or of another sender under this header.
    for (const auto& other : {made(size, 1, 4), made(size, 2, 3)}) {
      auto x = other;
      std::copy(m.begin(), m.begin() + kMessageHeader, x.begin());
      CHECK_FALSE(intact(x, 1, Verify::sampled));
    }
    // The body moved by one word (a block placed at the wrong offset).
    auto shifted = m;
    std::copy(m.begin() + kMessageHeader + 8, m.end(), shifted.begin() + kMessageHeader);
    CHECK_FALSE(intact(shifted, 1, Verify::sampled));
    // The last byte, which the sampled check always reads.
    auto tail = m;
    tail.back() ^= std::byte{0x80};
    CHECK_FALSE(intact(tail, 1, Verify::sampled));
  }
  // A body too short for the header is no message.
  CHECK_FALSE(check_message(7, 1, std::vector<std::byte>(kMessageHeader - 1), Verify::full));
}

TEST_CASE("workload: a stamp alone reads its index and attempt; one size is every message's size", "[workload]") {
  auto m = made(200, 3, 41);
  const auto stamp = std::span<const std::byte>(m).first(kMessageHeader);
  const auto c = check_message(7, 3, stamp, Verify::sampled);
  REQUIRE(c);
  CHECK(c->index == 41);
  CHECK(c->attempt == 0);
  CHECK(c->intact);  // nothing past the stamp to compare
  m[kMessageHeader] ^= std::byte{1};  // the body is not looked at through the stamp, but is in full
  CHECK(check_message(7, 3, std::span<const std::byte>(m).first(kMessageHeader), Verify::sampled)->intact);
  CHECK_FALSE(intact(m, 3, Verify::full));
  const auto one = SizeMix::parse("64");
  const auto two = SizeMix::parse("64,2048");
  bool saw[2] = {false, false};
  for (std::uint32_t i = 0; i < 200; ++i) {
    CHECK(one.size_of(7, 3, i) == 64);
    const auto s = two.size_of(7, 3, i);
    REQUIRE((s == 64 || s == 2048));
    saw[s == 64 ? 0 : 1] = true;
    CHECK(two.size_of(7, 3, i) == s);  // the same every time it is asked
  }
  CHECK((saw[0] && saw[1]));
}
