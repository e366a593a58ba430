// The simulator's event queue: earliest first, ties in scheduling order, payloads
// intact through slot reuse, against a plain sort of the same schedule.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "sim/event_queue.hpp"

namespace {

struct Scheduled {
  hmcast::TimeNs at;
  std::uint64_t order;  // when it was pushed
  std::string payload;
};

}  // namespace

TEST_CASE("event queue: pops earliest first, ties in the order they were pushed, payloads intact", "[sim]") {
  hmcast::Rng rng(7);
  hmcast::sim::EventQueue<std::string> q;
  std::vector<Scheduled> pending;
  std::vector<Scheduled> popped_expected;
  std::vector<std::pair<hmcast::TimeNs, std::string>> popped;
  std::uint64_t pushed = 0;
  hmcast::TimeNs now = 0;
  // Interleave pushes and pops so slots are freed and reused while others wait,
  // with few distinct times so ties are common.
  for (int round = 0; round < 2000; ++round) {
    const auto pushes = rng.below(5);
    for (std::uint64_t i = 0; i < pushes; ++i) {
      const hmcast::TimeNs at = now + static_cast<hmcast::TimeNs>(rng.below(8));
      const std::string payload = "event " + std::to_string(pushed);
      q.push(at, payload);
      pending.push_back(Scheduled{at, pushed++, payload});
    }
    const auto pops = std::min<std::uint64_t>(rng.below(5), pending.size());
    for (std::uint64_t i = 0; i < pops; ++i) {
      auto first = std::min_element(pending.begin(), pending.end(), [](const Scheduled& a, const Scheduled& b) {
        return a.at != b.at ? a.at < b.at : a.order < b.order;
      });
      popped_expected.push_back(*first);
      pending.erase(first);
      REQUIRE(q.next_at() == popped_expected.back().at);
      popped.push_back(q.pop());
      now = popped.back().first;
    }
    REQUIRE(q.size() == pending.size());
  }
  REQUIRE(popped.size() > 1000);
  for (std::size_t i = 0; i < popped.size(); ++i) {
    CHECK(popped[i].first == popped_expected[i].at);
    CHECK(popped[i].second == popped_expected[i].payload);
  }
}
