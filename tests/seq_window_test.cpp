// SeqWindow (small/seq_window.hpp) against std::map as the model: the same seeded
// operations on both, and after each one the same contents, in the same order, and
// the same answers to every lookup the small path makes.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "small/seq_window.hpp"

namespace {

using hmcast::Seq;
using hmcast::small::SeqWindow;
using Model = std::map<Seq, std::string>;

std::vector<std::pair<Seq, std::string>> contents(const SeqWindow<std::string>& w) {
  std::vector<std::pair<Seq, std::string>> out;
  for (auto it = w.begin(); it != w.end(); ++it) out.emplace_back(it->first, it->second);
  return out;
}

void same(const SeqWindow<std::string>& w, const Model& m, Seq probe_lo, Seq probe_hi) {
  REQUIRE(w.size() == m.size());
  REQUIRE(w.empty() == m.empty());
  REQUIRE(contents(w) == std::vector<std::pair<Seq, std::string>>(m.begin(), m.end()));
  for (Seq q = probe_lo; q <= probe_hi; ++q) {
    REQUIRE(w.count(q) == m.count(q));
    const auto f = w.find(q);
    REQUIRE((f == w.end()) == (m.find(q) == m.end()));
    if (f != w.end()) REQUIRE(f->second == m.at(q));
    const auto lb = w.lower_bound(q);
    const auto mlb = m.lower_bound(q);
    REQUIRE((lb == w.end()) == (mlb == m.end()));
    if (mlb != m.end()) REQUIRE(lb->first == mlb->first);
    const auto ub = w.upper_bound(q);
    const auto mub = m.upper_bound(q);
    REQUIRE((ub == w.end()) == (mub == m.end()));
    if (mub != m.end()) REQUIRE(ub->first == mub->first);
  }
}

}  // namespace

TEST_CASE("seq window: behaves as an ordered map under seeded inserts and prefix erases", "[small][seq_window]") {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    SeqWindow<std::string> w;
    Model m;
    Seq floor = 1 + rng() % 1000;  // streams may start anywhere (a member joins late)
    // Wider spreads on some seeds make the ring grow past its first size.
    const Seq spread = seed % 3 == 0 ? 300 : 24;
    for (int step = 0; step < 400; ++step) {
      const auto op = rng() % 10;
      if (op < 7) {
        const Seq s = floor + rng() % spread;
        if (m.count(s) == 0) {
          const std::string v = std::to_string(s * 7 + seed);
          w.emplace(s, v);
          m.emplace(s, v);
        }
      } else {
        // The small path erases through the stable prefix, which only moves on.
        const Seq upto = floor + rng() % (spread / 2);
        w.erase_through(upto);
        m.erase(m.begin(), m.upper_bound(upto));
        floor = std::max(floor, upto + 1);
      }
      same(w, m, floor > 3 ? floor - 3 : 1, floor + spread + 3);
    }
  }
}

TEST_CASE("seq window: keys below the first one and far above it both fit", "[small][seq_window]") {
  SeqWindow<int> w;
  w.emplace(1000, 1);
  w.emplace(990, 2);  // out of order, below the first key
  w.emplace(1100, 3);  // past the initial ring: it grows
  CHECK(w.size() == 3);
  CHECK(w.at(990) == 2);
  CHECK(w.at(1000) == 1);
  CHECK(w.at(1100) == 3);
  CHECK(w.upper_bound(1000)->first == 1100);
  CHECK(w.lower_bound(991)->first == 1000);
  w.erase_through(1000);
  CHECK(w.size() == 1);
  CHECK(w.count(990) == 0);
  CHECK(w.begin()->first == 1100);
  w.erase_through(5000);
  CHECK(w.empty());
  CHECK(w.begin() == w.end());
  w.emplace(7, 4);  // an empty window starts again anywhere
  CHECK(w.begin()->first == 7);
}
