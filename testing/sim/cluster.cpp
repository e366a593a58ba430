#include "sim/cluster.hpp"

#include <utility>

#include "core/assert.hpp"
#include "core/overloaded.hpp"

namespace hmcast::sim {

/// A member's transport on the fabric. Payload bytes are not carried: a block's
/// time on the wire is modelled from its length, and large buffers are null.
class Cluster::Transport final : public transport::Transport {
 public:
  Transport(Cluster& c, std::uint32_t node, MemberId self) : c_(c), node_(node), self_(self) {}
  [[nodiscard]] MemberId id() const override { return self_; }
  void multicast(std::span<const std::byte> bytes) override {
    c_.fabric_.multicast(node_, std::vector<std::byte>(bytes.begin(), bytes.end()));
  }
  bool unicast(MemberId to, std::vector<std::byte> frame) override {
    // A link to a crashed peer fails later, as a link_failed event (the fabric's timeout).
    if (const auto n = c_.node_of(to)) c_.fabric_.unicast(node_, *n, std::move(frame));
    return true;
  }
  /// ACKs travel as datagrams here too, lost and held back as multicast copies are.
  bool unicast_datagram(MemberId to, std::vector<std::byte> frame) override {
    if (const auto n = c_.node_of(to)) c_.fabric_.direct_datagram(node_, *n, std::move(frame));
    return true;
  }
  [[nodiscard]] std::size_t direct_datagram_limit(MemberId) const override { return c_.protocol_.mtu; }
  bool send_block(MemberId to, std::vector<std::byte> head, std::span<const std::byte> payload, std::uint64_t length,
                  std::shared_ptr<const void>) override {
    HMCAST_ASSERT(payload.empty());  // the simulator's buffers carry no bytes
    if (const auto n = c_.node_of(to)) c_.fabric_.transfer(node_, *n, std::move(head), length);
    return true;
  }
  void add_peer(MemberId, const std::string&, std::uint16_t) override {}  // node_by_member_ knows them
  transport::LargeBuffer allocate_large(std::size_t) override { return nullptr; }

 private:
  Cluster& c_;
  std::uint32_t node_;
  MemberId self_;
};

/// A member's control connection: encoded control messages to the coordinator's node.
class Cluster::Control final : public membership::ControlSink {
 public:
  Control(Cluster& c, std::uint32_t node) : c_(c), node_(node) {}
  void send(const membership::ControlMessage& m) override {
    c_.fabric_.control(node_, c_.coordinator_node(), membership::encode(m));
  }

 private:
  Cluster& c_;
  std::uint32_t node_;
};

namespace {
/// The simulator carries no payload bytes (its buffers are null): a Block frame's
/// payload counts as placed by the transport, as socket and verbs placement do.
constexpr bool kPlaced = true;
/// The coordinator's connection id for a member node (0 is never used).
membership::ConnId conn_of(std::uint32_t node) { return membership::ConnId{node} + 1; }
std::uint32_t node_of_conn(membership::ConnId conn) { return static_cast<std::uint32_t>(conn - 1); }
}  // namespace

Cluster::Cluster(std::uint32_t capacity, const NetworkModel& network, const ProtocolConfig& protocol,
                 std::uint64_t seed)
    : fabric_(capacity + 1, network, seed), protocol_(protocol), nodes_(capacity),
      coordinator_(membership::CoordinatorConfig{mix_hash(seed, 0xC00D), std::nullopt, std::nullopt}) {}

Cluster::~Cluster() = default;

void Cluster::start_member(std::uint32_t node, const std::string& group, std::uint32_t expected) {
  Node& n = nodes_[node];
  HMCAST_ASSERT(!n.started);
  n.started = true;
  n.control = std::make_unique<Control>(*this, node);
  n.control->send(membership::Join{group, expected});
}

void Cluster::crash(std::uint32_t node, bool detected) {
  Node& n = nodes_[node];
  if (n.crashed) return;
  n.crashed = true;  // its runtime stays (it may be on the stack); the fabric drops its events
  fabric_.crash(node);
  // The kernel closes a dead process's connections: the coordinator hears of it one
  // latency later. A silent host is found by keepalive, if suspicion was not faster.
  const TimeNs after = detected ? fabric_.model().latency_ns : fabric_.model().keepalive_ns;
  at(fabric_.now() + after, [this, node] { coordinator_out(coordinator_.on_disconnect(conn_of(node))); });
}

void Cluster::at(TimeNs when, TaskFn task) {
  tasks_.emplace(when, std::move(task));
  fabric_.wake(coordinator_node(), when);
}

runtime::Runtime* Cluster::runtime(std::uint32_t node) {
  return nodes_[node].crashed ? nullptr : nodes_[node].runtime.get();
}

std::optional<MemberId> Cluster::member_of(std::uint32_t node) const {
  const auto& w = nodes_[node].welcome;
  return w ? std::optional<MemberId>(w->member) : std::nullopt;
}

std::optional<std::uint32_t> Cluster::node_of(MemberId member) const {
  auto it = node_by_member_.find(member);
  return it == node_by_member_.end() ? std::nullopt : std::optional<std::uint32_t>(it->second);
}

small::BroadcastResult Cluster::broadcast(std::uint32_t node, MessageBuffer message) {
  AppEvents app;
  const auto r = nodes_[node].runtime->broadcast(std::move(message), fabric_.now(), app);
  after(node, app);
  return r;
}

large::LargeResult Cluster::broadcast_large(std::uint32_t node, std::uint64_t size) {
  AppEvents app;
  const auto r = nodes_[node].runtime->broadcast_large(nullptr, size, fabric_.now(), app);
  after(node, app);
  return r;
}

// ---------------------------------------------------------------------------
// Events

void Cluster::on_datagram(std::uint32_t node, const std::shared_ptr<const std::vector<std::byte>>& bytes,
                          TimeNs now) {
  if (node == coordinator_node()) return;
  if (!nodes_[node].runtime) {
    hold_early(node, std::nullopt, *bytes);
    return;
  }
  AppEvents app;
  nodes_[node].runtime->on_datagram(*bytes, now, app, bytes);
  after(node, app);
}

void Cluster::on_p2p(std::uint32_t node, std::uint32_t from, std::span<const std::byte> bytes, TimeNs now) {
  if (node == coordinator_node()) {
    coordinator_message(from, bytes);
    return;
  }
  if (from == coordinator_node()) {
    auto m = membership::decode_control(bytes);
    HMCAST_ASSERT(m.has_value());  // the coordinator's own encoding
    member_control(node, *m);
    return;
  }
  Node& n = nodes_[node];
  if (!n.runtime) {
    hold_early(node, from, bytes);
    return;
  }
  const auto peer = member_of(from);
  HMCAST_ASSERT(peer.has_value());  // only members that were welcomed send frames
  AppEvents app;
  n.runtime->on_frame(*peer, bytes, kPlaced, now, app);
  after(node, app);
}

void Cluster::on_timer(std::uint32_t node, TimeNs now) {
  if (node == coordinator_node()) {
    while (!tasks_.empty() && tasks_.begin()->first <= now) {
      auto task = std::move(tasks_.begin()->second);
      tasks_.erase(tasks_.begin());
      task();
    }
    return;
  }
  Node& n = nodes_[node];
  if (now >= n.wake_at) n.wake_at = kNever;
  if (!n.runtime) return;
  AppEvents app;
  n.runtime->on_timer(now, app);
  after(node, app);
}

void Cluster::on_link_failed(std::uint32_t node, std::uint32_t peer, TimeNs now) {
  Node& n = nodes_[node];
  if (node == coordinator_node() || !n.runtime) return;
  const auto member = member_of(peer);
  if (!member) return;
  AppEvents app;
  // What a real transport reports when a send finds the link broken.
  n.runtime->on_link_failed(*member, now, app);
  after(node, app);
}

void Cluster::hold_early(std::uint32_t node, std::optional<std::uint32_t> from, std::span<const std::byte> bytes) {
  Node& n = nodes_[node];
  if (!n.welcome || n.early.size() >= protocol_.future_packet_limit) return;  // nobody knows it yet, or full
  n.early.emplace_back(from, std::vector<std::byte>(bytes.begin(), bytes.end()));
}

void Cluster::member_control(std::uint32_t node, const membership::ControlMessage& m) {
  Node& n = nodes_[node];
  if (n.runtime) {
    AppEvents app;
    n.runtime->on_control(m, fabric_.now(), app);
    after(node, app);
    return;
  }
  // The join, as a Node does it (transport/control_client.hpp), event by event.
  if (const auto* w = std::get_if<membership::Welcome>(&m)) {
    n.welcome = *w;
    node_by_member_[w->member] = node;
    n.transport = std::make_unique<Transport>(*this, node, w->member);
    const std::uint64_t host = per_host_ > 1 ? node / per_host_ + 1 : 0;  // 0: a host of its own
    n.control->send(membership::Listening{"sim", static_cast<std::uint16_t>(node), host});
  } else if (const auto* v = std::get_if<membership::ViewPush>(&m)) {
    HMCAST_ASSERT(n.welcome.has_value());
    n.floors = runtime::view_change_of(*v).small_floors;
    n.runtime = std::make_unique<runtime::Runtime>(*n.transport, *n.control, n.welcome->group_id, n.welcome->member,
                                                   *v, protocol_, fabric_.now());
    if (on_ready) on_ready(node);
    AppEvents app;
    if (protocol_.multicast_probe_deadline_ns > 0) n.runtime->start_multicast_probe(fabric_.now(), app);
    after(node, app);
    for (auto& [from, bytes] : std::exchange(n.early, {})) {
      if (from) n.runtime->on_frame(*member_of(*from), bytes, kPlaced, fabric_.now(), app);
      else n.runtime->on_datagram(bytes, fabric_.now(), app);
      after(node, app);
    }
  } else if (const auto* r = std::get_if<membership::Refused>(&m)) {
    HMCAST_ASSERT(false && "the simulated coordinator refused a join");
    (void)r;
  }
  // FlushRequest and MulticastFallback cannot come before the first view.
}

void Cluster::coordinator_message(std::uint32_t from_node, std::span<const std::byte> bytes) {
  auto m = membership::decode_control(bytes);
  HMCAST_ASSERT(m.has_value());  // members' own encoding
  coordinator_out(coordinator_.on_message(conn_of(from_node), *m));
}

void Cluster::coordinator_out(std::vector<membership::ControlOut> outs) {
  views_issued_ += coordinator_.take_issued().size();
  for (auto& o : outs) {
    const auto to = node_of_conn(o.conn);
    if (o.message) fabric_.control(coordinator_node(), to, membership::encode(*o.message));
    if (o.close) coordinator_out(coordinator_.on_disconnect(o.conn));
  }
}

void Cluster::after(std::uint32_t node, AppEvents& app) {
  if (on_app)
    for (auto& a : app) on_app(node, a);
  app.clear();
  if (after_event) after_event(node);
  reschedule(node);
}

void Cluster::reschedule(std::uint32_t node) {
  Node& n = nodes_[node];
  if (!n.runtime) return;
  const TimeNs next = n.runtime->engine().next_wakeup();
  if (next < n.wake_at) {
    n.wake_at = next;
    fabric_.wake(node, next);
  }
}

}  // namespace hmcast::sim
