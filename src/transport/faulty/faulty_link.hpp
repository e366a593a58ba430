// The seeded fault layer: a Link that wraps any other and, on what it receives,
// drops, duplicates, reorders and delays datagrams, and delays reliable-link
// frames without ever reordering a peer's frames (TCP and RC links are FIFO).
// Sending passes straight through. One layer for every transport, so in-process
// nodes and real processes see the same faults (FaultConfig says which).
//
// Held items are released by wait(): it sleeps in the inner link until the
// caller's deadline or the next held item's release, whichever comes first, so
// wake() and close() mean what they mean on the inner link.
//
// Thread-safety as Link: wait() from one thread at a time; the rest, stats()
// included, from any thread.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "transport/forwarding_link.hpp"
#include "hmcast/node.hpp"
#include "core/rng.hpp"

namespace hmcast::transport {

class FaultyLink final : public ForwardingLink {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  /// Where the layer reads the time (tests pass a fake one; empty: steady_clock).
  using Clock = std::function<TimePoint()>;

  /// `faults` must have passed check_faults(). The generator is seeded with
  /// faults.seed mixed with inner->id().
  FaultyLink(std::unique_ptr<Link> inner, const FaultConfig& faults, Clock clock = {});
  ~FaultyLink() override = default;
  FaultyLink(const FaultyLink&) = delete;
  FaultyLink& operator=(const FaultyLink&) = delete;

  /// The next item due: held ones at their release time, new ones as the faults say.
  std::optional<Inbound> wait(TimePoint deadline) override;
  /// Drops what is held, then closes the inner link.
  void close() override;

  [[nodiscard]] FaultStats stats() const;

 private:
  /// A datagram held back until `countdown` later ones arrived, or until `release_by`.
  struct Reordered {
    std::uint32_t countdown = 0;
    TimePoint due;         // when it would have come out without reordering
    TimePoint release_by;  // the time bound
    Inbound in;
  };

  // All with mu_ held.
  void admit(Inbound in, TimePoint now);
  void admit_datagram_copy(Inbound in, TimePoint now);
  void hold(TimePoint due, Inbound in);
  void make_room();
  std::optional<Inbound> take_due(TimePoint now);
  [[nodiscard]] TimePoint next_due() const;
  [[nodiscard]] std::size_t held() const { return timed_.size() + reordered_.size() + ready_.size(); }
  std::int64_t draw(std::int64_t min_ns, std::int64_t max_ns);

  FaultConfig cfg_;
  Clock clock_;

  mutable std::mutex mu_;
  Rng rng_;
  /// Released in order of the time they are due; equal times in arrival order, so a
  /// peer's frames (whose times never decrease) come out FIFO.
  std::multimap<TimePoint, Inbound> timed_;
  std::deque<Reordered> reordered_;
  std::deque<Inbound> ready_;  // released early to make room: out first
  /// Per peer, the release time of its latest frame still held (a frame is never due
  /// before its predecessor); an entry goes when that frame comes out.
  std::map<MemberId, TimePoint> link_last_due_;
  FaultStats stats_;
};

/// `inner` wrapped in the fault layer if `faults` asks for any fault, else `inner`
/// itself. `faults` must have passed check_faults().
std::unique_ptr<Link> with_faults(std::unique_ptr<Link> inner, const FaultConfig& faults);

/// What the fault layer around `link` did (zeros if it has none).
FaultStats fault_stats(const Link& link);

/// The link under the fault layer (`link` itself if it has none).
const Link& without_faults(const Link& link);

}  // namespace hmcast::transport
