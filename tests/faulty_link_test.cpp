// The seeded fault layer (src/api/faulty_link.hpp) against a scripted Link and a
// fake clock: every figure here is exact for a seed, none depends on the machine.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "transport/faulty/fault_config.hpp"
#include "transport/faulty/faulty_link.hpp"
#include "hmcast/error.hpp"
#include "hmcast/node.hpp"

namespace d = hmcast::transport;
using TimePoint = d::FaultyLink::TimePoint;
using namespace std::chrono_literals;

namespace {

/// Time that moves only when a wait runs out (to its deadline), as if it slept.
struct FakeTime {
  TimePoint now = TimePoint{} + 1h;
};

/// What a transport would hand over: the items put in `inbox`, in order.
class ScriptedLink final : public d::Link {
 public:
  explicit ScriptedLink(FakeTime& t, hmcast::MemberId id = 7) : t_(t), id_(id) {}
  [[nodiscard]] hmcast::MemberId id() const override { return id_; }
  void multicast(std::span<const std::byte> bytes) override { sent.emplace_back(bytes.begin(), bytes.end()); }
  bool unicast(hmcast::MemberId, std::vector<std::byte> bytes) override {
    sent.push_back(std::move(bytes));
    return true;
  }
  std::optional<d::Inbound> wait(TimePoint deadline) override {
    ++waits;
    last_deadline = deadline;
    if (closed) return std::nullopt;
    if (!inbox.empty()) {
      auto in = std::move(inbox.front());
      inbox.pop_front();
      return in;
    }
    if (woken) {
      woken = false;
      return std::nullopt;
    }
    t_.now = std::max(t_.now, deadline);
    return std::nullopt;
  }
  void wake() override { woken = true; }
  void add_peer(hmcast::MemberId, const std::string&, std::uint16_t) override {}
  void close() override { closed = true; }

  std::deque<d::Inbound> inbox;
  std::vector<std::vector<std::byte>> sent;
  bool woken = false;
  bool closed = false;
  int waits = 0;
  TimePoint last_deadline{};

 private:
  FakeTime& t_;
  hmcast::MemberId id_;
};

/// An item numbered `n` (its first 4 bytes, little-endian).
d::Inbound item(bool datagram, hmcast::MemberId from, std::uint32_t n) {
  std::vector<std::byte> b(8);
  for (int i = 0; i < 4; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xffU);
  return d::Inbound{datagram, from, std::move(b), false};
}

std::uint32_t number(const d::Inbound& in) {
  std::uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint32_t>(in.bytes[static_cast<std::size_t>(i)]);
  return n;
}

struct Out {
  d::Inbound in;
  TimePoint at;
};

struct Rig {
  FakeTime t;
  ScriptedLink* inner = nullptr;
  std::unique_ptr<d::FaultyLink> link;
  std::vector<Out> out;

  explicit Rig(const hmcast::FaultConfig& f) {
    d::check_faults(f);
    auto s = std::make_unique<ScriptedLink>(t);
    inner = s.get();
    link = std::make_unique<d::FaultyLink>(std::move(s), f, [this] { return t.now; });
  }
  /// Everything due by now, without letting time pass.
  void drain() {
    while (auto in = link->wait(t.now)) out.push_back({std::move(*in), t.now});
  }
  /// Lets time pass in steps until nothing is held any more (bounded).
  void flush(std::chrono::nanoseconds step = 50us) {
    for (int i = 0; i < 1'000'000 && link->stats().held > 0; ++i) {
      const auto deadline = t.now + step;
      while (auto in = link->wait(deadline)) out.push_back({std::move(*in), t.now});
    }
    REQUIRE(link->stats().held == 0);
  }
  std::vector<std::uint32_t> numbers() const {
    std::vector<std::uint32_t> v;
    for (const auto& o : out) v.push_back(number(o.in));
    return v;
  }
};

std::vector<std::uint32_t> reorder_run(std::uint64_t seed) {
  hmcast::FaultConfig f;
  f.datagram_reorder = 0.2;
  f.datagram_reorder_depth = 4;
  f.seed = seed;
  Rig r(f);
  for (std::uint32_t n = 0; n < 2000; ++n) {
    r.inner->inbox.push_back(item(true, 1, n));
    r.drain();
  }
  r.flush();
  return r.numbers();
}

}  // namespace

TEST_CASE("fault layer: reordering reorders, loses nothing, and repeats for a seed", "[faults]") {
  const auto a = reorder_run(5);
  REQUIRE(a.size() == 2000);
  std::vector<std::uint32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t n = 0; n < 2000; ++n) REQUIRE(sorted[n] == n);  // each exactly once
  std::size_t late = 0;
  std::size_t max_late = 0;
  for (std::size_t pos = 0; pos < a.size(); ++pos) {
    if (a[pos] < pos) {
      ++late;
      max_late = std::max<std::size_t>(max_late, pos - a[pos]);
    }
  }
  CHECK(late > 100);  // about a fifth of them were held back
  // Overtaken by at most `depth` later ones, plus others released in the same step.
  CHECK(max_late <= 12);
  CHECK(reorder_run(5) == a);
  CHECK(reorder_run(6) != a);
}

TEST_CASE("fault layer: a held datagram waits for `depth` later ones, or for the time bound", "[faults]") {
  hmcast::FaultConfig f;
  f.datagram_reorder = 1.0;  // every one held: each is released by the one after it
  f.datagram_reorder_depth = 1;
  Rig r(f);
  for (std::uint32_t n = 0; n < 5; ++n) r.inner->inbox.push_back(item(true, 1, n));
  r.drain();
  // Depth 1: each is released when the next arrives, after it; the next is held in turn.
  CHECK(r.numbers() == std::vector<std::uint32_t>{0, 1, 2, 3});
  CHECK(r.link->stats().reordered == 5);
  // The last one has nothing behind it: the time bound releases it, not earlier.
  const auto before = r.t.now;
  r.flush(100us);
  CHECK(r.numbers().back() == 4);
  CHECK(r.out.back().at - before >= std::chrono::nanoseconds(f.datagram_reorder_max_ns));
}

TEST_CASE("fault layer: delayed datagrams come out within their delay bounds, all of them", "[faults]") {
  hmcast::FaultConfig f;
  f.datagram_delay_ns_min = 100'000;
  f.datagram_delay_ns_max = 900'000;
  Rig r(f);
  std::map<std::uint32_t, TimePoint> arrived;
  for (std::uint32_t n = 0; n < 500; ++n) {
    r.inner->inbox.push_back(item(true, 1, n));
    arrived[n] = r.t.now;
    r.drain();
    r.t.now += 3us;
  }
  r.flush(1s);  // long waits: the layer must still wake at each release time
  REQUIRE(r.out.size() == 500);
  std::set<std::uint32_t> seen;
  bool out_of_order = false;
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    const auto n = number(r.out[i].in);
    seen.insert(n);
    const auto delay = r.out[i].at - arrived[n];
    CHECK(delay >= 100us);
    CHECK(delay <= 900us);
    if (i > 0 && n < number(r.out[i - 1].in)) out_of_order = true;
  }
  CHECK(seen.size() == 500);
  CHECK(out_of_order);  // independent delays reorder too
  CHECK(r.link->stats().delayed == 500);
}

TEST_CASE("fault layer: wait() sleeps until the next release, not past it", "[faults]") {
  hmcast::FaultConfig f;
  f.datagram_delay_ns_min = 250'000;
  f.datagram_delay_ns_max = 250'000;
  Rig r(f);
  const auto t0 = r.t.now;
  r.inner->inbox.push_back(item(true, 1, 1));
  auto in = r.link->wait(t0 + 10s);
  REQUIRE(in);
  CHECK(r.t.now == t0 + 250us);
  CHECK(r.inner->last_deadline == t0 + 250us);
}

TEST_CASE("fault layer: link frames are delayed but each peer's stay in order; none is lost", "[faults]") {
  hmcast::FaultConfig f;
  f.link_delay_ns_max = 2'000'000;
  f.datagram_loss = 1.0;  // applies to datagrams only
  Rig r(f);
  constexpr std::uint32_t kPerPeer = 400;
  std::vector<std::uint32_t> sent_order;
  for (std::uint32_t n = 0; n < kPerPeer; ++n) {
    for (hmcast::MemberId p = 1; p <= 3; ++p) {
      r.inner->inbox.push_back(item(false, p, n));
      sent_order.push_back(p * 100000 + n);
    }
    r.inner->inbox.push_back(item(true, 4, n));
    r.drain();
    r.t.now += 10us;
  }
  r.flush();
  std::map<hmcast::MemberId, std::uint32_t> next;
  std::vector<std::uint32_t> got_order;
  for (const auto& o : r.out) {
    REQUIRE_FALSE(o.in.datagram);
    CHECK(number(o.in) == next[o.in.from]);
    next[o.in.from] = number(o.in) + 1;
    got_order.push_back(o.in.from * 100000 + number(o.in));
  }
  for (hmcast::MemberId p = 1; p <= 3; ++p) CHECK(next[p] == kPerPeer);
  CHECK(got_order != sent_order);  // peers' frames do interleave differently
  const auto st = r.link->stats();
  CHECK(st.link_delayed > kPerPeer);
  CHECK(st.dropped == kPerPeer);
}

TEST_CASE("fault layer: loss and duplication rates stay within statistical bounds", "[faults]") {
  hmcast::FaultConfig f;
  f.datagram_loss = 0.1;
  f.datagram_duplicate = 0.05;
  f.seed = 99;
  Rig r(f);
  constexpr std::uint32_t kN = 20000;
  for (std::uint32_t n = 0; n < kN; ++n) {
    r.inner->inbox.push_back(item(true, 1, n));
    r.drain();
  }
  const auto st = r.link->stats();
  // Binomial: sd = sqrt(n p (1 - p)); six of them either side.
  CHECK(st.dropped >= 2000 - 255);
  CHECK(st.dropped <= 2000 + 255);
  const double kept = kN - static_cast<double>(st.dropped);
  CHECK(static_cast<double>(st.duplicated) >= 0.05 * kept - 6 * std::sqrt(kept * 0.05 * 0.95));
  CHECK(static_cast<double>(st.duplicated) <= 0.05 * kept + 6 * std::sqrt(kept * 0.05 * 0.95));
  CHECK(r.out.size() == kN - st.dropped + st.duplicated);
  CHECK(st.reordered == 0);
  CHECK(st.delayed == 0);
}

TEST_CASE("fault layer: at max_held the item due first goes out early; memory stays bounded", "[faults]") {
  hmcast::FaultConfig f;
  f.datagram_delay_ns_min = 1'000'000'000;
  f.datagram_delay_ns_max = 1'000'000'000;
  f.link_delay_ns_max = 1'000'000'000;
  f.datagram_duplicate = 0.5;
  f.max_held = 16;
  Rig r(f);
  std::uint64_t copies = 0;
  for (std::uint32_t n = 0; n < 1000; ++n) {
    r.inner->inbox.push_back(item(n % 2 == 0, 1 + n % 3, n));
    r.drain();
    CHECK(r.link->stats().held <= 16);
  }
  const auto st = r.link->stats();
  copies = 1000 + st.duplicated;
  CHECK(st.held == 16);
  CHECK(st.released_early == copies - 16);
  CHECK(r.out.size() == copies - 16);
  r.flush(100ms);
  CHECK(r.out.size() == copies);
  // Frames released early still kept each peer's order.
  std::map<hmcast::MemberId, std::int64_t> last;
  for (const auto& o : r.out) {
    if (o.in.datagram) continue;
    auto [it, fresh] = last.try_emplace(o.in.from, -1);
    CHECK(static_cast<std::int64_t>(number(o.in)) > it->second);
    it->second = number(o.in);
  }
}

TEST_CASE("fault layer: wake() and close() keep their meaning; sends pass through", "[faults]") {
  hmcast::FaultConfig f;
  f.datagram_delay_ns_min = 5'000'000;
  f.datagram_delay_ns_max = 5'000'000;
  Rig r(f);
  r.inner->inbox.push_back(item(true, 1, 1));
  r.drain();
  CHECK(r.link->stats().held == 1);
  const auto t0 = r.t.now;
  r.link->wake();
  CHECK_FALSE(r.link->wait(t0 + 1s));  // woken: back at once, the held item not yet due
  CHECK(r.t.now == t0);
  r.link->multicast(std::vector<std::byte>(3));
  CHECK(r.link->unicast(2, std::vector<std::byte>(4)));
  CHECK(r.inner->sent.size() == 2);
  CHECK(r.link->id() == 7);
  r.link->close();
  CHECK(r.inner->closed);
  CHECK(r.link->stats().held == 0);
  CHECK_FALSE(r.link->wait(t0 + 1s));
}

TEST_CASE("fault layer: left out when no fault is asked for; bad settings are clear errors", "[faults]") {
  FakeTime t;
  auto plain = std::make_unique<ScriptedLink>(t);
  const d::Link* raw = plain.get();
  auto same = d::with_faults(std::move(plain), hmcast::FaultConfig{});
  CHECK(same.get() == raw);
  CHECK(d::fault_stats(*same).dropped == 0);

  const auto bad = [](auto change) {
    hmcast::FaultConfig f;
    change(f);
    try {
      d::check_faults(f);
    } catch (const hmcast::Error& e) {
      CHECK(e.code() == hmcast::ErrorCode::invalid_config);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(bad([](auto& f) { f.datagram_loss = 1.5; }), Catch::Contains("datagram_loss"));
  CHECK_THAT(bad([](auto& f) { f.datagram_reorder = -0.1; }), Catch::Contains("datagram_reorder"));
  CHECK_THAT(bad([](auto& f) { f.datagram_delay_ns_max = 11'000'000'000; }), Catch::Contains("datagram_delay_ns_max"));
  CHECK_THAT(bad([](auto& f) { f.link_delay_ns_max = -1; }), Catch::Contains("link_delay_ns_max"));
  CHECK_THAT(bad([](auto& f) { f.datagram_delay_ns_min = 5; }), Catch::Contains("datagram_delay_ns_min"));
  CHECK_THAT(bad([](auto& f) { f.datagram_reorder_depth = 0; }), Catch::Contains("datagram_reorder_depth"));
  CHECK_THAT(bad([](auto& f) { f.max_held = 0; }), Catch::Contains("max_held"));

  hmcast::Config cfg;
  cfg.fabric = "faults-bad-config";
  cfg.faults.datagram_duplicate = 2;
  CHECK_THROWS_AS(hmcast::Node(cfg), hmcast::Error);
}

TEST_CASE("fault layer: the HMCAST_FAULT_* environment overrides the config", "[faults]") {
  struct Env {
    std::vector<std::string> names;
    void set(const char* n, const char* v) {
      ::setenv(n, v, 1);
      names.emplace_back(n);
    }
    ~Env() {
      for (const auto& n : names) ::unsetenv(n.c_str());
    }
  } env;
  env.set("HMCAST_FAULT_REORDER", "0.25");
  env.set("HMCAST_FAULT_DELAY_US", "200");
  env.set("HMCAST_FAULT_LINK_DELAY_US", "100");
  env.set("HMCAST_FAULT_SEED", "42");
  hmcast::FaultConfig f;
  f.datagram_delay_ns_min = 50;
  f = d::faults_with_environment(f);
  CHECK(f.datagram_reorder == 0.25);
  CHECK(f.datagram_delay_ns_min == 0);
  CHECK(f.datagram_delay_ns_max == 200'000);
  CHECK(f.link_delay_ns_max == 100'000);
  CHECK(f.seed == 42);
  CHECK(f.datagram_loss == 0);
  env.set("HMCAST_FAULT_DELAY_US", "-3");
  CHECK_THROWS_WITH(d::faults_with_environment({}), Catch::Contains("HMCAST_FAULT_DELAY_US"));
  env.set("HMCAST_FAULT_DELAY_US", "20000000");  // 20 s: over the bound
  CHECK_THROWS_WITH(d::faults_with_environment({}), Catch::Contains("HMCAST_FAULT_DELAY_US"));
  env.set("HMCAST_FAULT_DELAY_US", "0");
  env.set("HMCAST_FAULT_REORDER", "often");
  CHECK_THROWS_WITH(d::faults_with_environment({}), Catch::Contains("HMCAST_FAULT_REORDER"));
}
