// Whole nodes on the simulated fabric: every member runs the production runtime
// (runtime/runtime.hpp: the group engine and its paths) over a simulated transport,
// and the production coordinator (membership/coordinator.hpp) runs as one more
// node that members reach over control connections: joins with their flush,
// suspicions, removal by new views, the multicast probe and its fallback, all as
// in a real deployment, in virtual time and from one seed.
//
// Node indexes: members are 0..capacity-1 (a node starts when start_member() is
// called, so joiners can come mid-run); the coordinator is node `capacity`.
// Member ids are the coordinator's, in the order Joins reach it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/actions.hpp"
#include "hmcast/config.hpp"
#include "membership/coordinator.hpp"
#include "runtime/runtime.hpp"
#include "sim/fabric.hpp"

namespace hmcast::sim {

class Cluster final : public Host {
 public:
  /// What the application of `node` sees (Deliver, Completed, DeliverLarge,
  /// CompletedLarge, FailedLarge, ViewInstalled, Removed).
  using AppFn = std::function<void(std::uint32_t node, AppEvent& a)>;
  /// Called after every event a node handled (and when it becomes ready).
  using NodeFn = std::function<void(std::uint32_t node)>;
  /// Called at a time asked for with at().
  using TaskFn = std::function<void()>;

  Cluster(std::uint32_t capacity, const NetworkModel& network, const ProtocolConfig& protocol, std::uint64_t seed);
  ~Cluster() override;
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  /// Node `node` joins `group` (of `expected` members) now: it asks the coordinator.
  void start_member(std::uint32_t node, const std::string& group, std::uint32_t expected);
  /// Crash-stop `node`. `detected`: its process died and its control connection
  /// closes (the coordinator learns it after one latency, as from a TCP reset);
  /// otherwise its host went silent: suspicions (broken links, spent repair
  /// budgets) remove it, or the control connection's keepalive after
  /// NetworkModel::keepalive_ns.
  void crash(std::uint32_t node, bool detected);
  /// Multicast stops reaching `node` (its probe partners then report it).
  void block_multicast(std::uint32_t node) { fabric_.block_multicast(node); }
  /// Nodes say they share hosts `per_host` at a time (node i on host i / per_host):
  /// the views then shape ACK trees and block schedules by host. 0 or 1: a host each.
  void set_per_host(std::uint32_t per_host) { per_host_ = per_host; }
  /// Runs `task` at virtual time `at` (on the coordinator's node).
  void at(TimeNs at, TaskFn task);
  /// Runs until `until`, no events remain, or stop().
  void run(TimeNs until) { fabric_.run(*this, until); }
  void stop() { fabric_.stop(); }

  /// The node's runtime once its first view is installed (null before, and after a crash).
  [[nodiscard]] runtime::Runtime* runtime(std::uint32_t node);
  [[nodiscard]] bool crashed(std::uint32_t node) const { return nodes_[node].crashed; }
  [[nodiscard]] std::optional<MemberId> member_of(std::uint32_t node) const;
  [[nodiscard]] std::optional<std::uint32_t> node_of(MemberId member) const;
  /// What the node's first view said of each sender's small stream (a joiner starts after it).
  [[nodiscard]] const std::map<MemberId, Seq>& first_floors(std::uint32_t node) const { return nodes_[node].floors; }

  /// Broadcasts from `node` (which must be ready); what the application sees goes to on_app.
  small::BroadcastResult broadcast(std::uint32_t node, MessageBuffer message);
  large::LargeResult broadcast_large(std::uint32_t node, std::uint64_t size);

  [[nodiscard]] Fabric& fabric() { return fabric_; }
  [[nodiscard]] TimeNs now() const { return fabric_.now(); }
  /// Views the coordinator issued, the first included.
  [[nodiscard]] std::uint64_t views_issued() const { return views_issued_; }
  [[nodiscard]] std::uint32_t coordinator_node() const { return static_cast<std::uint32_t>(nodes_.size()); }

  AppFn on_app;
  NodeFn on_ready;
  NodeFn after_event;

  // Host
  void on_datagram(std::uint32_t node, const std::shared_ptr<const std::vector<std::byte>>& bytes,
                   TimeNs now) override;
  void on_p2p(std::uint32_t node, std::uint32_t from, std::span<const std::byte> bytes, TimeNs now) override;
  void on_timer(std::uint32_t node, TimeNs now) override;
  void on_link_failed(std::uint32_t node, std::uint32_t peer, TimeNs now) override;

 private:
  std::uint32_t per_host_ = 0;
  class Transport;
  class Control;
  struct Node {
    bool started = false;
    bool crashed = false;
    std::optional<membership::Welcome> welcome;
    std::unique_ptr<Transport> transport;
    std::unique_ptr<Control> control;
    std::unique_ptr<runtime::Runtime> runtime;
    std::map<MemberId, Seq> floors;
    TimeNs wake_at = kNever;
    /// What arrived between the Welcome and the first view: a real transport holds
    /// it in its socket buffers until the runtime starts (bounded like them).
    std::vector<std::pair<std::optional<std::uint32_t>, std::vector<std::byte>>> early;  // (from node, or datagram)
  };

  void member_control(std::uint32_t node, const membership::ControlMessage& m);
  void hold_early(std::uint32_t node, std::optional<std::uint32_t> from, std::span<const std::byte> bytes);
  void coordinator_message(std::uint32_t from_node, std::span<const std::byte> bytes);
  void coordinator_out(std::vector<membership::ControlOut> outs);
  void after(std::uint32_t node, AppEvents& app);
  void reschedule(std::uint32_t node);

  Fabric fabric_;
  ProtocolConfig protocol_;
  std::vector<Node> nodes_;
  std::map<MemberId, std::uint32_t> node_by_member_;
  membership::Coordinator coordinator_;
  std::multimap<TimeNs, TaskFn> tasks_;
  std::uint64_t views_issued_ = 0;
};

}  // namespace hmcast::sim
