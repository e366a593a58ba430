#include "transport/sim/small_scenario.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "small/engine.hpp"

namespace hmcast::sim {

namespace {

constexpr GroupId kGroup = 0x51;

/// The payload of (sender, seq): reproducible anywhere, so every member can check it.
std::vector<std::byte> message_bytes(MemberId sender, Seq seq, std::uint32_t size) {
  std::vector<std::byte> b(size);
  Rng r((std::uint64_t{sender} << 40) ^ seq);
  for (std::size_t i = 0; i < b.size(); i += 8) {
    std::uint64_t w = r.next();
    for (std::size_t j = i; j < std::min<std::size_t>(i + 8, b.size()); ++j, w >>= 8)
      b[j] = static_cast<std::byte>(w & 0xffU);
  }
  return b;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto idx = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size()))) ;
  return v[std::min(v.size() - 1, idx == 0 ? 0 : idx - 1)];
}

class SmallRun final : public Host {
 public:
  explicit SmallRun(const SmallScenario& sc)
      : sc_(sc), fabric_(sc.nodes, sc.network, sc.seed), wake_at_(sc.nodes, kNever),
        expected_(sc.nodes), crashed_(sc.nodes, false), removed_(sc.nodes, false) {
    View v{1, {}};
    for (std::uint32_t i = 0; i < sc.nodes; ++i) v.members.push_back(i);
    for (std::uint32_t i = 0; i < sc.nodes; ++i)
      engines_.push_back(std::make_unique<small::Engine>(kGroup, i, v, sc.protocol, 0));
    const std::uint32_t senders = std::clamp<std::uint32_t>(sc.senders, 1, sc.nodes);
    for (std::uint32_t k = 0; k < senders; ++k) {
      const auto rank = static_cast<std::uint32_t>(std::uint64_t{k} * sc.nodes / senders);
      sender_index_[rank] = k;
      senders_.push_back(SenderState{rank, 0, 0, {}});
    }
    for (auto& e : expected_) e.assign(senders, 1);
    // Crash victims: neither senders nor the manager (rank 0); each at a random point of progress.
    std::vector<std::uint32_t> candidates;
    for (std::uint32_t i = 1; i < sc.nodes; ++i)
      if (sender_index_.count(i) == 0) candidates.push_back(i);
    const std::uint64_t total = std::uint64_t{senders} * sc.messages;
    for (std::uint32_t c = 0; c < sc.crash && !candidates.empty(); ++c) {
      const auto pick = fabric_.rng().below(candidates.size());
      const std::uint32_t victim = candidates[pick];
      candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
      const auto at = static_cast<std::uint64_t>(static_cast<double>(total) * (0.1 + 0.6 * fabric_.rng().uniform()));
      crashes_.emplace(at, victim);
    }
    held_bound_ = std::uint64_t{senders} * 3 * sc.protocol.window_messages;
  }

  SmallResult run() {
    for (const auto& s : senders_) refill(s.rank);
    for (std::uint32_t i = 0; i < sc_.nodes; ++i) reschedule(i);
    fabric_.run(*this, sc_.time_limit_ns);
    return finish();
  }

  void on_datagram(std::uint32_t node, std::span<const std::byte> bytes, TimeNs now) override {
    engines_[node]->on_datagram(bytes, now, out_);
    after(node, now);
  }
  void on_p2p(std::uint32_t node, std::uint32_t from, std::span<const std::byte> bytes, TimeNs now) override {
    engines_[node]->on_p2p(from, bytes, now, out_);
    after(node, now);
  }
  void on_timer(std::uint32_t node, TimeNs now) override {
    if (now >= wake_at_[node]) wake_at_[node] = kNever;
    engines_[node]->on_timer(now, out_);
    after(node, now);
  }

 private:
  struct SenderState {
    std::uint32_t rank;
    Seq sent;
    Seq completed;
    std::vector<TimeNs> started;  // broadcast() time per seq
  };

  void after(std::uint32_t node, TimeNs now) {
    execute(node, now);
    if (sender_index_.count(node) != 0) refill(node);
    const auto held = engines_[node]->held_messages();
    max_held_ = std::max<std::uint64_t>(max_held_, held);
    if (held > held_bound_) violation("node " + std::to_string(node) + " holds " + std::to_string(held) +
                                      " messages, over the bound " + std::to_string(held_bound_));
    reschedule(node);
  }

  void reschedule(std::uint32_t node) {
    const TimeNs next = engines_[node]->next_wakeup();
    if (next < wake_at_[node]) {
      wake_at_[node] = next;
      fabric_.wake(node, next);
    }
  }

  void refill(std::uint32_t rank) {
    if (crashed_[rank] || removed_[rank]) return;
    SenderState& s = senders_[sender_index_.at(rank)];
    auto& engine = *engines_[rank];
    while (s.sent < sc_.messages && engine.window_has_room(sc_.size)) {
      auto msg = std::make_shared<const std::vector<std::byte>>(message_bytes(rank, s.sent + 1, sc_.size));
      const auto res = engine.broadcast(std::move(msg), fabric_.now(), out_);
      if (res.error != small::BroadcastError::none) {
        violation("broadcast refused with room in the window at sender " + std::to_string(rank));
        break;
      }
      ++s.sent;
      s.started.push_back(fabric_.now());
      if (engine.in_flight() > sc_.protocol.window_messages) violation("sender window exceeded");
      execute(rank, fabric_.now());
    }
  }

  void execute(std::uint32_t node, TimeNs now) {
    // Actions can make more actions (a completion refills the window), so drain by index.
    Outbox batch;
    batch.swap(out_);
    for (auto& a : batch) {
      std::visit(
          [&](auto& act) {
            using T = std::decay_t<decltype(act)>;
            if constexpr (std::is_same_v<T, action::SendDatagram>) {
              fabric_.multicast(node, std::move(act.bytes));
            } else if constexpr (std::is_same_v<T, action::SendP2P>) {
              fabric_.unicast(node, act.to, std::move(act.bytes));
            } else if constexpr (std::is_same_v<T, action::Deliver>) {
              check_delivery(node, act);
            } else if constexpr (std::is_same_v<T, action::Completed>) {
              on_completed(node, act.seq, now);
            } else if constexpr (std::is_same_v<T, action::Removed>) {
              removed_[node] = true;
              if (!crashed_[node]) ++result_.removed_alive;
            } else if constexpr (std::is_same_v<T, action::ViewInstalled>) {
              // counted from the manager's stats at the end
            }
          },
          a);
    }
  }

  void check_delivery(std::uint32_t node, const action::Deliver& d) {
    auto it = sender_index_.find(d.sender);
    if (it == sender_index_.end()) {
      violation("node " + std::to_string(node) + " delivered from non-sender " + std::to_string(d.sender));
      return;
    }
    Seq& expect = expected_[node][it->second];
    if (d.seq < expect) {
      ++result_.duplicates_delivered;
    } else if (d.seq > expect) {
      ++result_.fifo_violations;
      expect = d.seq + 1;
    } else {
      ++expect;
    }
    if (*d.message != message_bytes(d.sender, d.seq, sc_.size)) ++result_.corrupt_delivered;
  }

  void on_completed(std::uint32_t node, Seq seq, TimeNs now) {
    SenderState& s = senders_[sender_index_.at(node)];
    if (seq != s.completed + 1) violation("completion out of order at sender " + std::to_string(node));
    s.completed = seq;
    ++completed_total_;
    latencies_.push_back(static_cast<double>(now - s.started[seq - 1]) / 1000.0);
    while (!crashes_.empty() && crashes_.begin()->first <= completed_total_) {
      const auto victim = crashes_.begin()->second;
      crashes_.erase(crashes_.begin());
      fabric_.crash(victim);
      crashed_[victim] = true;
      ++result_.crashed;
    }
    if (completed_total_ == std::uint64_t{sc_.messages} * senders_.size()) fabric_.stop();
  }

  void violation(std::string what) {
    if (result_.violations.size() < 8) result_.violations.push_back(std::move(what));
  }

  SmallResult finish() {
    SmallResult& r = result_;
    r.nodes = sc_.nodes;
    r.sim_time_us = fabric_.now() / 1000;
    for (const auto& s : senders_) {
      r.messages_sent += s.sent;
      r.completed += s.completed;
    }
    r.timed_out = r.completed != std::uint64_t{sc_.messages} * senders_.size();
    for (std::uint32_t n = 0; n < sc_.nodes; ++n) {
      if (crashed_[n] || removed_[n]) continue;
      for (std::size_t k = 0; k < senders_.size(); ++k) {
        const Seq delivered = expected_[n][k] - 1;
        if (senders_[k].completed > delivered) r.missing += senders_[k].completed - delivered;
      }
    }
    for (const auto& e : engines_) {
      const auto& st = e->stats();
      r.acks_sent += st.acks_sent;
      r.repairs += st.repairs_sent;
      r.remulticasts += st.remulticasts;
      r.pulls += st.pulls_sent;
      r.bad_packets_dropped += st.decode_errors + st.wrong_group_dropped + st.non_member_dropped + st.invalid_dropped;
    }
    r.views_installed = 1 + engines_[0]->stats().views_installed;
    r.datagrams_sent = fabric_.stats().datagrams_sent;
    r.p2p_messages_sent = fabric_.stats().p2p_sent;
    r.completion_p50_us = percentile(latencies_, 0.50);
    r.completion_p99_us = percentile(latencies_, 0.99);
    r.completion_max_us = latencies_.empty() ? 0 : *std::max_element(latencies_.begin(), latencies_.end());
    r.max_held_messages = max_held_;
    r.held_bound = held_bound_;
    r.trace_hash = fabric_.trace_hash();
    r.delivered_ok = !r.timed_out && r.duplicates_delivered == 0 && r.fifo_violations == 0 &&
                     r.corrupt_delivered == 0 && r.missing == 0 && r.removed_alive == 0 && r.violations.empty();
    return r;
  }

  SmallScenario sc_;
  Fabric fabric_;
  std::vector<std::unique_ptr<small::Engine>> engines_;
  std::vector<TimeNs> wake_at_;
  std::map<std::uint32_t, std::uint32_t> sender_index_;
  std::vector<SenderState> senders_;
  std::vector<std::vector<Seq>> expected_;  // [node][sender index]: next seq to deliver
  std::vector<bool> crashed_;
  std::vector<bool> removed_;
  std::multimap<std::uint64_t, std::uint32_t> crashes_;  // completed-count threshold -> victim
  std::uint64_t completed_total_ = 0;
  std::vector<double> latencies_;
  std::uint64_t max_held_ = 0;
  std::uint64_t held_bound_ = 0;
  Outbox out_;
  SmallResult result_;
};

}  // namespace

std::string SmallScenario::command_line() const {
  std::ostringstream o;
  o.precision(17);  // the replay must draw the very same numbers
  o << "build/bin/hmcast sim small --nodes " << nodes << " --senders " << senders << " --messages " << messages
    << " --size " << size << " --loss " << network.loss << " --dup " << network.duplicate << " --reorder "
    << network.reorder << " --crash " << crash << " --radix " << protocol.radix << " --latency-us "
    << static_cast<double>(network.latency_ns) / 1000.0 << " --mtu " << protocol.mtu << " --window " << protocol.window_messages << " --seed " << seed
    << " --json";
  return o.str();
}

std::string SmallResult::to_json() const {
  nlohmann::ordered_json j;
  j["nodes"] = nodes;
  j["messages_sent"] = messages_sent;
  j["completed"] = completed;
  j["delivered_ok"] = delivered_ok;
  j["duplicates_delivered"] = duplicates_delivered;
  j["fifo_violations"] = fifo_violations;
  j["corrupt_delivered"] = corrupt_delivered;
  j["missing"] = missing;
  j["views_installed"] = views_installed;
  j["crashed"] = crashed;
  j["removed_alive"] = removed_alive;
  j["sim_time_us"] = sim_time_us;
  j["datagrams_sent"] = datagrams_sent;
  j["p2p_messages_sent"] = p2p_messages_sent;
  j["acks_sent"] = acks_sent;
  j["repairs"] = repairs;
  j["remulticasts"] = remulticasts;
  j["pulls"] = pulls;
  j["bad_packets_dropped"] = bad_packets_dropped;
  j["max_held_messages"] = max_held_messages;
  j["held_bound"] = held_bound;
  j["timed_out"] = timed_out;
  j["completion_p50_us"] = completion_p50_us;
  j["completion_p99_us"] = completion_p99_us;
  j["completion_max_us"] = completion_max_us;
  j["trace_hash"] = trace_hash;
  j["violations"] = violations;
  return j.dump();
}

SmallResult run_small(const SmallScenario& scenario) { return SmallRun(scenario).run(); }

}  // namespace hmcast::sim
