#include "transport/sim/large_scenario.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "policy/defaults.hpp"
#include "small/engine.hpp"

namespace hmcast::sim {

namespace {

constexpr GroupId kGroup = 0x1a;

class LargeRun final : public Host {
 public:
  explicit LargeRun(const LargeScenario& sc)
      : sc_(sc), fabric_(sc.nodes, model(sc), sc.seed), wake_at_(sc.nodes, kNever), crashed_(sc.nodes, false),
        removed_(sc.nodes, false), delivered_(sc.nodes) {
    View v{1, {}};
    for (std::uint32_t i = 0; i < sc.nodes; ++i) v.members.push_back(i);
    ProtocolConfig protocol = policy::sim_defaults(sc.latency_ns);
    protocol.block_size = sc.block;
    protocol.large_algorithm = sc.algorithm;
    protocol.large_queue_limit = sc.messages + 4;
    protocol.large_receive_window = sc.receive_window;
    protocol.segment_size = sc.segment;
    protocol.large_credit_lead_bytes = sc.credit_lead;
    for (std::uint32_t i = 0; i < sc.nodes; ++i)
      engines_.push_back(std::make_unique<small::Engine>(kGroup, i, v, protocol, 0));
    const std::uint32_t senders = std::clamp<std::uint32_t>(sc.senders, 1, sc.nodes);
    for (std::uint32_t k = 0; k < senders; ++k) senders_.insert(static_cast<std::uint32_t>(std::uint64_t{k} * sc.nodes / senders));
    const auto blocks = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, (sc.size + sc.block - 1) / sc.block));
    result_.blocks = blocks;
    const auto schedule = large::make_schedule(sc.algorithm, sc.nodes, 0, blocks);
    result_.steps = schedule->steps();
    // Slow links are links the schedule uses (a random pair would rarely carry data).
    for (std::uint32_t k = 0; k < sc.slow_links && schedule->steps() > 0; ++k) {
      for (int attempt = 0; attempt < 1000; ++attempt) {
        const auto step = static_cast<std::uint32_t>(fabric_.rng().below(schedule->steps()));
        const auto rank = static_cast<std::uint32_t>(fabric_.rng().below(sc.nodes));
        const auto sends = schedule->sends(rank, step);
        if (sends.empty()) continue;
        fabric_.slow_link(sends[0].from, sends[0].to, sc.slow_factor);
        break;
      }
    }
    for (std::uint32_t k = 0; k < sc.slow_nodes; ++k)
      fabric_.slow_node(static_cast<std::uint32_t>(fabric_.rng().below(sc.nodes)), sc.slow_factor);
    unicast_ns_ = sc.latency_ns + static_cast<TimeNs>(static_cast<double>(sc.size) * 8.0 / sc.link_gbps);
    std::vector<std::uint32_t> candidates;
    for (std::uint32_t i = 1; i < sc.nodes; ++i)
      if (senders_.count(i) == 0) candidates.push_back(i);
    for (std::uint32_t c = 0; c < sc.crash && !candidates.empty(); ++c) {
      const auto pick = fabric_.rng().below(candidates.size());
      const auto at = static_cast<TimeNs>(static_cast<double>(unicast_ns_) * (0.1 + 0.5 * fabric_.rng().uniform()));
      crashes_.emplace(at, candidates[pick]);
      candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }

  LargeResult run() {
    for (auto s : senders_) {
      for (std::uint32_t m = 0; m < sc_.messages; ++m) {
        const auto r = engines_[s]->broadcast_large(sc_.size, fabric_.now(), out_);
        if (r.error != large::LargeError::none) violation("broadcast_large refused at sender " + std::to_string(s));
        ++result_.messages_sent;
        execute(s);
      }
      reschedule(s);
    }
    fabric_.run(*this, 3'600'000'000'000LL);  // virtual hour: a hang shows as timed_out
    return finish();
  }

  void on_datagram(std::uint32_t node, std::span<const std::byte> bytes, TimeNs now) override {
    engines_[node]->on_datagram(bytes, now, out_);
    after(node);
  }
  void on_p2p(std::uint32_t node, std::uint32_t from, std::span<const std::byte> bytes, TimeNs now) override {
    engines_[node]->on_p2p(from, bytes, now, out_);
    after(node);
  }
  void on_timer(std::uint32_t node, TimeNs now) override {
    if (now >= wake_at_[node]) wake_at_[node] = kNever;
    engines_[node]->on_timer(now, out_);
    after(node);
  }
  void on_link_failed(std::uint32_t node, std::uint32_t peer, TimeNs now) override {
    engines_[node]->on_link_failed(peer, now, out_);
    after(node);
  }

 private:
  static NetworkModel model(const LargeScenario& sc) {
    NetworkModel m;
    m.latency_ns = sc.latency_ns;
    m.link_gbps = sc.link_gbps;
    m.block_overhead_ns = sc.block_overhead_ns;
    m.jitter_ns = 0;
    return m;
  }

  void after(std::uint32_t node) {
    execute(node);
    reschedule(node);
    while (!crashes_.empty() && crashes_.begin()->first <= fabric_.now()) {
      const auto victim = crashes_.begin()->second;
      crashes_.erase(crashes_.begin());
      fabric_.crash(victim);
      crashed_[victim] = true;
      ++result_.crashed;
    }
  }

  void reschedule(std::uint32_t node) {
    const TimeNs next = engines_[node]->next_wakeup();
    if (next < wake_at_[node]) {
      wake_at_[node] = next;
      fabric_.wake(node, next);
    }
  }

  void execute(std::uint32_t node) {
    Outbox batch;
    batch.swap(out_);
    for (auto& a : batch) {
      if (auto* d = std::get_if<action::SendDatagram>(&a)) {
        fabric_.multicast(node, std::move(d->bytes));
      } else if (auto* p = std::get_if<action::SendP2P>(&a)) {
        fabric_.unicast(node, p->to, std::move(p->bytes));
      } else if (auto* b = std::get_if<action::SendBlock>(&a)) {
        fabric_.transfer(node, b->to, std::move(b->frame), b->length);
      } else if (auto* nb = std::get_if<action::NeedBuffer>(&a)) {
        engines_[node]->buffer_ready(nb->sender, nb->seq, out_);  // the allocator answers at once here
      } else if (auto* dl = std::get_if<action::DeliverLarge>(&a)) {
        if (!delivered_[node].insert({dl->sender, dl->seq}).second) ++result_.duplicates_delivered;
        if (dl->size != sc_.size) violation("delivered a message of the wrong size");
        result_.last_delivery_us = std::max(result_.last_delivery_us, static_cast<double>(fabric_.now()) / 1000.0);
      } else if (auto* c = std::get_if<action::CompletedLarge>(&a)) {
        completed_.insert({node, c->seq});
        result_.sim_time_us = std::max(result_.sim_time_us, static_cast<double>(fabric_.now()) / 1000.0);
        if (completed_.size() == std::uint64_t{sc_.messages} * senders_.size()) fabric_.stop();
      } else if (auto* f = std::get_if<action::FailedLarge>(&a)) {
        ++result_.failures;  // only a removed member's messages fail: survivors' restart
        result_.failure_reason = f->reason;
      } else if (std::holds_alternative<action::Removed>(a)) {
        removed_[node] = true;
        if (!crashed_[node]) violation("live member " + std::to_string(node) + " was removed");
      }
    }
    if (!out_.empty()) execute(node);  // what the actions above produced
  }

  void violation(std::string what) {
    if (result_.violations.size() < 8) result_.violations.push_back(std::move(what));
  }

  LargeResult finish() {
    LargeResult& r = result_;
    r.nodes = sc_.nodes;
    r.algorithm = std::string(large::to_string(sc_.algorithm));
    r.size = sc_.size;
    r.block = sc_.block;
    r.segment = std::clamp<std::uint64_t>(sc_.segment, 1, sc_.block);
    r.completed = completed_.size();
    r.timed_out = r.completed != std::uint64_t{sc_.messages} * senders_.size();
    r.unicast_time_us = static_cast<double>(unicast_ns_) / 1000.0;
    const double ideal = r.unicast_time_us * static_cast<double>(sc_.messages * senders_.size());
    r.ratio_vs_unicast = ideal > 0 ? r.last_delivery_us / ideal : 0;
    for (std::uint32_t n = 0; n < sc_.nodes; ++n) {
      if (crashed_[n] || removed_[n]) continue;
      for (const auto& [sender, seq] : completed_)
        if (delivered_[n].count({sender, seq}) == 0) ++r.missing;
    }
    for (const auto& e : engines_) {
      r.invalid_dropped += e->pipeline().stats().invalid_dropped;
      r.blocks_sent += e->pipeline().stats().blocks_sent;
      r.segments_sent += e->pipeline().stats().segments_sent;
      r.restarted += e->pipeline().stats().restarted;
      r.redeliveries_suppressed += e->pipeline().stats().redeliveries_suppressed;
    }
    r.views_installed = 1 + engines_[0]->stats().views_installed;
    r.bytes_on_wire = fabric_.stats().bytes_on_wire;
    r.delivered_ok = !r.timed_out && r.missing == 0 && r.duplicates_delivered == 0 && r.invalid_dropped == 0 &&
                     r.violations.empty();
    return r;
  }

  LargeScenario sc_;
  Fabric fabric_;
  std::vector<std::unique_ptr<small::Engine>> engines_;
  std::vector<TimeNs> wake_at_;
  std::set<std::uint32_t> senders_;
  std::vector<bool> crashed_;
  std::vector<bool> removed_;
  std::vector<std::set<std::pair<MemberId, Seq>>> delivered_;
  std::set<std::pair<MemberId, Seq>> completed_;
  std::multimap<TimeNs, std::uint32_t> crashes_;
  TimeNs unicast_ns_ = 0;
  Outbox out_;
  LargeResult result_;
};

}  // namespace

std::string LargeScenario::command_line() const {
  std::ostringstream o;
  o.precision(17);
  o << "build/bin/hmcast sim large --nodes " << nodes << " --senders " << senders << " --messages " << messages
    << " --size " << size << " --block " << block << " --segment " << segment
    << " --credit-lead " << credit_lead << " --algo " << large::to_string(algorithm)
    << " --link-gbps " << link_gbps << " --latency-us " << static_cast<double>(latency_ns) / 1000.0
    << " --block-overhead-us " << static_cast<double>(block_overhead_ns) / 1000.0 << " --slow-links " << slow_links
    << " --slow-nodes " << slow_nodes << " --slow-factor " << slow_factor << " --crash " << crash
    << " --receive-window " << receive_window << " --seed " << seed
    << " --json";
  return o.str();
}

std::string LargeResult::to_json() const {
  nlohmann::ordered_json j;
  j["nodes"] = nodes;
  j["algorithm"] = algorithm;
  j["size"] = size;
  j["block"] = block;
  j["segment"] = segment;
  j["blocks"] = blocks;
  j["steps"] = steps;
  j["sim_time_us"] = sim_time_us;
  j["last_delivery_us"] = last_delivery_us;
  j["unicast_time_us"] = unicast_time_us;
  j["ratio_vs_unicast"] = ratio_vs_unicast;
  j["delivered_ok"] = delivered_ok;
  j["messages_sent"] = messages_sent;
  j["completed"] = completed;
  j["failures"] = failures;
  j["failure_reason"] = failure_reason;
  j["restarted"] = restarted;
  j["redeliveries_suppressed"] = redeliveries_suppressed;
  j["views_installed"] = views_installed;
  j["crashed"] = crashed;
  j["duplicates_delivered"] = duplicates_delivered;
  j["missing"] = missing;
  j["invalid_dropped"] = invalid_dropped;
  j["blocks_sent"] = blocks_sent;
  j["segments_sent"] = segments_sent;
  j["bytes_on_wire"] = bytes_on_wire;
  j["timed_out"] = timed_out;
  j["violations"] = violations;
  return j.dump();
}

LargeResult run_large(const LargeScenario& scenario) { return LargeRun(scenario).run(); }

}  // namespace hmcast::sim
