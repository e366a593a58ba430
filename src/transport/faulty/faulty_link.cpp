#include "transport/faulty/faulty_link.hpp"

#include <algorithm>
#include <vector>

#include "transport/faulty/fault_config.hpp"

namespace hmcast::transport {

FaultyLink::FaultyLink(std::unique_ptr<Link> inner, const FaultConfig& faults, Clock clock)
    : ForwardingLink(std::move(inner)),
      cfg_(faults),
      clock_(clock ? std::move(clock) : Clock([] { return std::chrono::steady_clock::now(); })),
      rng_(mix_hash(faults.seed, inner_->id())) {}

std::optional<Inbound> FaultyLink::wait(TimePoint deadline) {
  for (;;) {
    TimePoint until;
    {
      std::lock_guard lock(mu_);
      if (auto out = take_due(clock_())) return out;
      until = std::min(deadline, next_due());
    }
    auto in = inner_->wait(until);  // not under mu_: stats() and close() stay free meanwhile
    std::lock_guard lock(mu_);
    const TimePoint now = clock_();
    if (in) {
      admit(std::move(*in), now);
      continue;  // what it released, if anything, comes out at the top
    }
    if (auto out = take_due(now)) return out;
    // Nothing due: the caller's deadline passed, or the inner link was woken or
    // closed before our own next release.
    if (now >= deadline || now < until) return std::nullopt;
  }
}

void FaultyLink::close() {
  {
    std::lock_guard lock(mu_);
    timed_.clear();
    reordered_.clear();
    ready_.clear();
    link_last_due_.clear();
  }
  inner_->close();
}

FaultStats FaultyLink::stats() const {
  std::lock_guard lock(mu_);
  FaultStats s = stats_;
  s.held = held();
  return s;
}

void FaultyLink::admit(Inbound in, TimePoint now) {
  if (!in.datagram) {
    // Delayed, but never before the same peer's previous frame: the link stays FIFO.
    TimePoint due = now + std::chrono::nanoseconds(draw(0, cfg_.link_delay_ns_max));
    auto [last, fresh] = link_last_due_.try_emplace(in.from, due);
    if (!fresh) {
      due = std::max(due, last->second);
      last->second = due;
    }
    if (due > now) ++stats_.link_delayed;
    make_room();
    hold(due, std::move(in));
    return;
  }
  if (rng_.chance(cfg_.datagram_loss)) {
    ++stats_.dropped;
    return;
  }
  if (rng_.chance(cfg_.datagram_duplicate)) {
    ++stats_.duplicated;
    admit_datagram_copy(in, now);  // each copy is delayed and reordered on its own
  }
  admit_datagram_copy(std::move(in), now);
}

void FaultyLink::admit_datagram_copy(Inbound in, TimePoint now) {
  const std::int64_t delay = draw(cfg_.datagram_delay_ns_min, cfg_.datagram_delay_ns_max);
  const TimePoint due = now + std::chrono::nanoseconds(delay);
  if (delay > 0) ++stats_.delayed;
  make_room();
  // This datagram overtakes every one held for reordering; those whose count is
  // reached come out after it (no earlier than it is due, so it really is ahead).
  std::vector<Reordered> overtaken;
  for (auto it = reordered_.begin(); it != reordered_.end();) {
    if (--it->countdown == 0) {
      overtaken.push_back(std::move(*it));
      it = reordered_.erase(it);
    } else {
      ++it;
    }
  }
  if (rng_.chance(cfg_.datagram_reorder)) {
    ++stats_.reordered;
    const auto depth = static_cast<std::uint32_t>(1 + rng_.below(cfg_.datagram_reorder_depth));
    reordered_.push_back(Reordered{depth, due, due + std::chrono::nanoseconds(cfg_.datagram_reorder_max_ns),
                                   std::move(in)});
  } else {
    hold(due, std::move(in));
  }
  for (auto& r : overtaken) hold(std::max(r.due, due), std::move(r.in));
}

void FaultyLink::hold(TimePoint due, Inbound in) { timed_.emplace(due, std::move(in)); }

void FaultyLink::make_room() {
  if (timed_.size() + reordered_.size() < cfg_.max_held) return;
  ++stats_.released_early;
  // The one due first: the least change to what the faults asked for, and for a
  // frame the oldest of its peer's, so the link stays FIFO (ready_ goes out first).
  if (!timed_.empty()) {
    auto node = timed_.extract(timed_.begin());
    ready_.push_back(std::move(node.mapped()));
  } else {
    ready_.push_back(std::move(reordered_.front().in));
    reordered_.pop_front();
  }
}

std::optional<Inbound> FaultyLink::take_due(TimePoint now) {
  if (!ready_.empty()) {
    Inbound in = std::move(ready_.front());
    ready_.pop_front();
    return in;
  }
  for (auto it = reordered_.begin(); it != reordered_.end();) {
    if (it->release_by <= now) {  // no later datagram came in time: out at its time bound
      hold(it->release_by, std::move(it->in));
      it = reordered_.erase(it);
    } else {
      ++it;
    }
  }
  if (timed_.empty() || timed_.begin()->first > now) return std::nullopt;
  auto node = timed_.extract(timed_.begin());
  Inbound in = std::move(node.mapped());
  if (!in.datagram) {
    // Every held frame of this peer is due by now: a new one cannot overtake them.
    auto last = link_last_due_.find(in.from);
    if (last != link_last_due_.end() && last->second <= now) link_last_due_.erase(last);
  }
  if (link_last_due_.size() > cfg_.max_held)  // peers whose last frame was released early
    std::erase_if(link_last_due_, [&](const auto& e) { return e.second <= now; });
  return in;
}

FaultyLink::TimePoint FaultyLink::next_due() const {
  if (!ready_.empty()) return TimePoint::min();
  TimePoint next = timed_.empty() ? TimePoint::max() : timed_.begin()->first;
  for (const auto& r : reordered_) next = std::min(next, r.release_by);
  return next;
}

std::int64_t FaultyLink::draw(std::int64_t min_ns, std::int64_t max_ns) {
  if (max_ns <= min_ns) return min_ns;
  return min_ns + static_cast<std::int64_t>(rng_.below(static_cast<std::uint64_t>(max_ns - min_ns) + 1));
}

std::unique_ptr<Link> with_faults(std::unique_ptr<Link> inner, const FaultConfig& faults) {
  if (!any_fault(faults)) return inner;
  return std::make_unique<FaultyLink>(std::move(inner), faults);
}

FaultStats fault_stats(const Link& link) {
  if (const auto* f = dynamic_cast<const FaultyLink*>(&link)) return f->stats();
  return {};
}

const Link& without_faults(const Link& link) {
  if (const auto* f = dynamic_cast<const FaultyLink*>(&link)) return f->inner();
  return link;
}

}  // namespace hmcast::transport
