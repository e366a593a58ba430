// The public API over a protocol engine per group and one progress thread per node.
//
// Locking: each group's engine is guarded by its own mutex; whoever calls the engine
// (the progress thread, or a user thread in broadcast()) sends the resulting frames
// at once under that mutex, and queues everything the application sees (deliveries,
// completions, view changes) for the progress thread, which runs callbacks with no
// lock held, so callbacks may call broadcast().
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <cstdlib>

#include "api/fault_config.hpp"
#include "api/faulty_link.hpp"
#include "api/link.hpp"
#include "core/name_hash.hpp"
#include "core/wire.hpp"
#include "hmcast/node.hpp"
#include "membership/control_wire.hpp"
#include "policy/defaults.hpp"
#include "policy/policy.hpp"
#include "transport/socket/manager_client.hpp"
#include "transport/socket/manager_server.hpp"
#include "transport/socket/net_util.hpp"
#include "small/engine.hpp"

namespace hmcast {

namespace detail {

namespace {

TimeNs now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct GroupState {
  std::mutex mu;
  std::condition_variable room;  // signalled when a completion frees window space
  std::unique_ptr<small::Engine> engine;
  std::map<Seq, std::promise<void>> pending;
  std::map<Seq, std::promise<void>> pending_large;
  // Buffers of large messages: ours (kept until no member needs blocks from us) and
  // those coming in (allocated when announced, kept while we forward from them).
  std::map<std::pair<MemberId, Seq>, std::shared_ptr<std::vector<std::byte>>> large;
  std::span<const std::byte> inbound_payload;  // of the block frame being handed to the engine
  std::deque<Action> to_app;  // deliveries, completions, views: for the progress thread
  Group::DeliverFn on_deliver;
  Group::ViewFn on_view;
  // A flush (a member joins, membership/control_wire.hpp): new broadcasts wait
  // until the view that ends it; Flushed goes out once ours are all-acked.
  bool paused = false;
  std::optional<ViewId> flush_view;
  bool closed = false;
  ErrorCode closed_code = ErrorCode::removed;
  std::string closed_why = "this member is no longer in the group; join again";
  NodeState* node = nullptr;
  std::uint64_t empty_blocks_dropped = 0;  // Block frames without payload that nobody placed
  std::uint64_t last_block_size = 0;       // the policy's block size for our last large message
  // Multicast fallback (small/multicast_probe.hpp): once the manager says so, every
  // datagram goes to each member over its reliable link instead.
  bool multicast_emulated = false;
  std::uint64_t emulated_datagrams = 0;    // datagrams sent as reliable-link frames
  std::vector<MemberId> probe_silent;      // members our probe reported, if it failed
};

struct NodeState {
  Config cfg;
  ProtocolConfig protocol;

  /// How long a Completion polls before it sleeps: the transport's busy-poll window,
  /// so an application thread waiting on a broadcast is as awake as the progress thread.
  [[nodiscard]] std::chrono::nanoseconds completion_spin() const {
    auto spin_of = [](CompletionMode mode, std::chrono::nanoseconds window) {
      if (mode == CompletionMode::poll) return std::chrono::nanoseconds::max();
      return mode == CompletionMode::hybrid ? window : std::chrono::nanoseconds{0};
    };
    if (cfg.transport == TransportKind::socket) return spin_of(cfg.socket.completion, cfg.socket.busy_poll);
    if (cfg.transport == TransportKind::verbs) return spin_of(cfg.verbs.completion, cfg.verbs.busy_poll);
    return std::chrono::nanoseconds{0};
  }
  std::unique_ptr<Link> link;  // inproc: from the start; socket: once join() has an id
  std::unique_ptr<socket::ManagerServer> manager;  // socket with embed_manager
  std::unique_ptr<socket::ManagerClient> control;  // socket: this member's manager connection
  std::mutex groups_mu;
  std::map<GroupId, std::shared_ptr<GroupState>> groups;
  std::atomic<bool> stop{false};
  std::thread progress;

  /// Carry out an engine's actions: frames go out now, the rest is queued for the
  /// application. Called with g.mu held.
  void execute(GroupState& g, Outbox& out) {
    std::vector<MemberId> broken_links;
    for (auto& a : out) {
      if (auto* d = std::get_if<action::SendDatagram>(&a)) {
        if (!g.multicast_emulated) {
          link->multicast(d->bytes);
          continue;
        }
        for (MemberId m : g.engine->view().members) {
          if (m == g.engine->self()) continue;
          ++g.emulated_datagrams;
          if (!link->unicast(m, d->bytes)) broken_links.push_back(m);
        }
      } else if (auto* mu = std::get_if<action::MulticastUnusable>(&a)) {
        g.probe_silent = mu->silent;
        if (control) control->report_multicast_failed(mu->view, mu->silent);
      } else if (auto* p = std::get_if<action::SendP2P>(&a)) {
        if (!link->unicast(p->to, std::move(p->bytes))) broken_links.push_back(p->to);
      } else if (auto* b = std::get_if<action::SendBlock>(&a)) {
        // In-process, a segment travels inside its frame: the description plus its bytes,
        // read from our buffer at the segment's own offset (a relay forwards bytes it
        // placed there when it accepted them, never a copy of the frame it got).
        auto res = wire::decode(b->frame);
        auto buf = g.large.find({b->sender, b->seq});
        if (!res.ok() || buf == g.large.end()) continue;  // cannot happen: the engine names held ranges
        auto block = std::get<wire::Block>(res.packet.body);
        block.payload = std::span<const std::byte>(*buf->second).subspan(b->offset, b->length);
        if (!link->unicast(b->to, wire::encode(res.packet.header, block))) broken_links.push_back(b->to);
      } else if (auto* nb = std::get_if<action::NeedBuffer>(&a)) {
        // Refusing a buffer leaves the transfer to stall and be abandoned: it is bounded by config.
        if (nb->size > protocol.max_large_message) continue;
        auto buf = link->allocate_large(nb->size);
        g.large[{nb->sender, nb->seq}] = buf;
        // Before buffer_ready(): its Ready frames are what makes the transport
        // advertise the buffer to the peers that will write into it.
        link->offer_region(nb->sender, nb->seq, std::move(buf));
        Outbox more;
        g.engine->buffer_ready(nb->sender, nb->seq, more);
        execute(g, more);
      } else if (auto* acc = std::get_if<action::BlockAccepted>(&a)) {
        // The one copy on the receiving side: the segment's bytes, straight to their final offset.
        auto buf = g.large.find({acc->sender, acc->seq});
        if (buf != g.large.end() && g.inbound_payload.size() == acc->length &&
            acc->offset + acc->length <= buf->second->size())
          std::copy(g.inbound_payload.begin(), g.inbound_payload.end(),
                    buf->second->begin() + static_cast<std::ptrdiff_t>(acc->offset));
      } else if (auto* dl = std::get_if<action::DeliverLarge>(&a)) {
        auto buf = g.large.find({dl->sender, dl->seq});
        if (buf != g.large.end()) g.to_app.emplace_back(action::Deliver{dl->sender, dl->seq, buf->second, true});
      } else if (auto* rel = std::get_if<action::ReleaseLarge>(&a)) {
        g.large.erase({rel->sender, rel->seq});
        link->retire_region(rel->sender, rel->seq);
      } else if (auto* dis = std::get_if<action::DiscardLarge>(&a)) {
        g.large.erase({dis->sender, dis->seq});
        link->retire_region(dis->sender, dis->seq);
      } else if (auto* rs = std::get_if<action::ReportSuspect>(&a)) {
        if (control) control->report_suspect(g.engine->view().id, rs->member);
      } else {
        g.to_app.push_back(std::move(a));
      }
    }
    out.clear();
    // A peer whose endpoint is gone will never answer: tell the protocol now.
    while (!broken_links.empty()) {
      const MemberId peer = broken_links.back();
      broken_links.pop_back();
      Outbox more;
      g.engine->on_link_failed(peer, now_ns(), more);
      out.swap(more);
      execute(g, out);
    }
  }

  /// Where the payload of an arriving Block frame goes: its final offset in the
  /// message's buffer, if the engine allows it (Pipeline::may_place_segment). Runs inside the
  /// transport's wait() with the transport's lock held, so it only try-locks (a
  /// user thread in broadcast() holds a group's lock while it calls the transport):
  /// when busy, the frame arrives whole and is copied as usual.
  std::optional<socket::Placement> place_block(MemberId from, std::span<const std::byte> head, std::size_t size) {
    auto res = wire::decode(head);  // the head alone decodes as a Block without payload
    if (!res.ok()) return std::nullopt;
    const auto* b = std::get_if<wire::Block>(&res.packet.body);
    if (b == nullptr || b->length != size - head.size()) return std::nullopt;
    std::shared_ptr<GroupState> g;
    {
      std::unique_lock lock(groups_mu, std::try_to_lock);
      if (!lock) return std::nullopt;
      auto it = groups.find(res.packet.header.group);
      if (it == groups.end()) return std::nullopt;
      g = it->second;
    }
    std::unique_lock lock(g->mu, std::try_to_lock);
    if (!lock || !g->engine->may_place_segment(from, res.packet.header, *b)) return std::nullopt;
    auto buf = g->large.find({b->sender, b->seq});
    if (buf == g->large.end() || b->offset + b->length > buf->second->size()) return std::nullopt;
    return socket::Placement{std::span(*buf->second).subspan(b->offset, b->length), buf->second};
  }

  /// Answer a pending flush request once all our messages are all-acked. g.mu held.
  void maybe_report_flushed(GroupState& g) {
    if (!g.flush_view || !control) return;
    const auto& e = *g.engine;
    if (e.in_flight() != 0 || e.pipeline().sending()) return;
    control->flushed(*g.flush_view, e.next_seq(), e.pipeline().next_seq());
    g.flush_view.reset();  // answered; `paused` stays until the view that ends the flush
  }

  std::vector<std::shared_ptr<GroupState>> snapshot() {
    std::lock_guard lock(groups_mu);
    std::vector<std::shared_ptr<GroupState>> v;
    for (auto& [id, g] : groups) v.push_back(g);
    return v;
  }

  void run() {
    while (!stop.load()) {
      TimeNs next = kNever;
      for (auto& g : snapshot()) {
        std::lock_guard lock(g->mu);
        next = std::min(next, g->engine->next_wakeup());
      }
      const auto now_tp = std::chrono::steady_clock::now();
      auto deadline = now_tp + std::chrono::milliseconds(50);  // also notices stop
      if (next != kNever) {
        const auto until = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(next));
        deadline = std::min(deadline, std::max(until, now_tp));
      }
      try {
        auto in = link->wait(deadline);
        while (in) {
          dispatch(*in);
          in = link->wait(std::chrono::steady_clock::now());  // drain what is queued
        }
      } catch (const Error& e) {
        // The transport is gone; nothing can complete any more.
        for (auto& g : snapshot()) fail_all(*g, e.code(), e.what());
        for (auto& g : snapshot()) run_callbacks(*g);
        return;
      }
      for (auto& g : snapshot()) {
        {
          std::lock_guard lock(g->mu);
          const TimeNs now = now_ns();
          if (now >= g->engine->next_wakeup()) {
            Outbox out;
            g->engine->on_timer(now, out);
            execute(*g, out);
          }
          maybe_report_flushed(*g);
        }
        run_callbacks(*g);
      }
    }
  }

  void dispatch(const inproc::Inbound& in) {
    // Route by the header's group id; the engine checks everything else.
    std::shared_ptr<GroupState> g;
    if (in.bytes.size() >= wire::kHeaderSize) {
      const GroupId gid = wire::peek_group(in.bytes);
      std::lock_guard lock(groups_mu);
      auto it = groups.find(gid);
      if (it != groups.end()) g = it->second;
    }
    if (!g) return;  // not a group of ours: nothing to count it against
    std::lock_guard lock(g->mu);
    Outbox out;
    if (in.datagram) {
      g->engine->on_datagram(in.bytes, now_ns(), out);
    } else if (wire::is_datagram_type(wire::peek_type(in.bytes))) {
      // Emulated multicast: a datagram that came over the sender's own link, so it
      // must name that sender (the link vouches for who sent it).
      if (wire::peek_src(in.bytes) != in.from) return;
      g->engine->on_datagram(in.bytes, now_ns(), out);
    } else {
      g->inbound_payload = {};
      if (in.bytes.size() > wire::kHeaderSize && wire::peek_type(in.bytes) == wire::Type::block) {
        auto res = wire::decode(in.bytes);
        if (res.ok()) {
          const auto& b = std::get<wire::Block>(res.packet.body);
          // A payload left out of the frame is only fine if the transport placed it.
          if (b.payload.empty() && b.length != 0 && !in.placed) {
            ++g->empty_blocks_dropped;
            return;
          }
          g->inbound_payload = b.payload;
        }
      }
      g->engine->on_p2p(in.from, in.bytes, now_ns(), out);
    }
    execute(*g, out);
    g->inbound_payload = {};
    maybe_report_flushed(*g);
  }

  void run_callbacks(GroupState& g) {
    std::deque<Action> todo;
    Group::DeliverFn deliver;
    Group::ViewFn view;
    {
      std::lock_guard lock(g.mu);
      deliver = g.on_deliver;
      view = g.on_view;
      if (!deliver) {
        // Hold deliveries until the application listens; pass the rest on.
        std::deque<Action> keep;
        for (auto& a : g.to_app) (std::holds_alternative<action::Deliver>(a) ? keep : todo).push_back(std::move(a));
        g.to_app.swap(keep);
      } else {
        todo.swap(g.to_app);
      }
    }
    for (auto& a : todo) {
      if (auto* d = std::get_if<action::Deliver>(&a)) {
        deliver(Delivery{d->sender, d->seq, d->large, *d->message, d->message});
      } else if (auto* cl = std::get_if<action::CompletedLarge>(&a)) {
        settle(g, g.pending_large, cl->seq, nullptr);
      } else if (auto* fl = std::get_if<action::FailedLarge>(&a)) {
        settle(g, g.pending_large, fl->seq, std::make_exception_ptr(Error(ErrorCode::removed, fl->reason)));  // the only cause
      } else if (auto* c = std::get_if<action::Completed>(&a)) {
        settle(g, g.pending, c->seq, nullptr);
      } else if (auto* v = std::get_if<action::ViewInstalled>(&a)) {
        if (view) view(v->view, v->left);
      } else if (std::holds_alternative<action::Removed>(a)) {
        fail_all(g, ErrorCode::removed,
                 "this member was removed from the group (the others stopped hearing from it); join again");
      }
    }
  }

  /// Fulfil (or fail, with `error`) the Completion of `seq`, and wake senders waiting for room.
  static void settle(GroupState& g, std::map<Seq, std::promise<void>>& pending, Seq seq, std::exception_ptr error) {
    std::lock_guard lock(g.mu);
    auto it = pending.find(seq);
    if (it != pending.end()) {
      if (error) it->second.set_exception(error);
      else it->second.set_value();
      pending.erase(it);
    }
    g.room.notify_all();
  }

  static void fail_all(GroupState& g, ErrorCode code, const std::string& why) {
    std::lock_guard lock(g.mu);
    if (!g.closed) {
      g.closed_code = code;
      g.closed_why = why;
    }
    g.closed = true;
    for (auto& [seq, p] : g.pending) p.set_exception(std::make_exception_ptr(Error(code, why)));
    for (auto& [seq, p] : g.pending_large) p.set_exception(std::make_exception_ptr(Error(code, why)));
    g.pending.clear();
    g.pending_large.clear();
    g.room.notify_all();
  }
};

}  // namespace detail

namespace detail {

/// What a view that ends a flush says of each sender's small stream (ViewPush::starts).
std::map<MemberId, Seq> stream_floors(const membership::ViewPush& v) {
  std::map<MemberId, Seq> floors;
  if (v.ends_flush)
    for (const auto& st : v.starts) floors[st.member] = st.next_small - 1;
  return floors;
}

/// Join over the socket transport: get an id and addresses from the manager, open
/// the endpoint, wait for the first view, then follow the manager's views.
void join_socket(NodeState& s, const std::string& name, const std::shared_ptr<GroupState>& g) {
  if (s.control)
    throw Error(ErrorCode::invalid_config,
                "a Node on the socket or verbs transport joins one group: create another Node for '" + name + "'");
  const auto deadline = std::chrono::steady_clock::now() + s.cfg.join_timeout;
  const auto [host, port] = socket::split_host_port(s.cfg.socket.manager, "manager address");
  s.control = std::make_unique<socket::ManagerClient>(host, port, deadline);
  const auto welcome = s.control->join(name, s.cfg.group_size, deadline);
  if (s.cfg.transport == TransportKind::verbs)
    s.link = make_verbs_link(welcome.member, welcome.multicast_address, s.cfg.verbs, s.cfg.faults);
  else
    s.link = make_socket_link(welcome.member, welcome.multicast_address, welcome.multicast_port, s.cfg.socket,
                              s.cfg.faults);
  s.link->set_block_placer([node = &s](MemberId from, std::span<const std::byte> head, std::size_t size) {
    return node->place_block(from, head, size);
  });
  s.control->listening(listening_address(*s.link, s.cfg.socket.interface_address), listening_port(*s.link));
  const auto first = s.control->wait_view(deadline);
  for (const auto& m : first.members)
    if (m.id != welcome.member) s.link->add_peer(m.id, m.host, m.port);
  g->engine = std::make_unique<small::Engine>(welcome.group_id, welcome.member, membership::view_of(first),
                                                 s.protocol, now_ns());
  g->engine->use_external_membership();
  g->engine->set_stream_floors(stream_floors(first));  // joining a running group: start where the flush left it
  g->multicast_emulated = first.multicast_emulated;
  {
    std::lock_guard lock(s.groups_mu);
    s.groups[welcome.group_id] = g;
  }
  if (s.protocol.multicast_probe_deadline_ns > 0) {
    // Does our multicast reach everyone? (small/multicast_probe.hpp) The answers
    // come while the group already runs: until then, what multicast loses is repaired.
    std::lock_guard lock(g->mu);
    Outbox out;
    g->engine->start_multicast_probe(now_ns(), out);
    s.execute(*g, out);
  }
  NodeState* node = &s;
  std::weak_ptr<GroupState> weak = g;
  s.control->start(
      [node, weak](const membership::ViewPush& v) {
        auto group = weak.lock();
        if (!group) return;
        for (const auto& m : v.members)
          if (m.id != node->link->id()) node->link->add_peer(m.id, m.host, m.port);
        {
          std::lock_guard lock(group->mu);
          Outbox out;
          if (v.multicast_emulated) group->multicast_emulated = true;
          group->engine->set_stream_floors(stream_floors(v));
          group->engine->apply_view(membership::view_of(v), now_ns(), out);
          node->execute(*group, out);
          if (v.ends_flush) {
            group->paused = false;
            group->flush_view.reset();
            group->room.notify_all();
          }
          node->maybe_report_flushed(*group);
        }
        node->link->wake();
      },
      [node, weak](ViewId view) {
        auto group = weak.lock();
        if (!group) return;
        std::lock_guard lock(group->mu);
        group->paused = true;
        group->flush_view = view;
        node->maybe_report_flushed(*group);
      },
      [weak](ViewId) {
        // The manager switched the whole group: from now on every datagram goes over
        // reliable links (what multicast lost meanwhile is repaired as usual).
        auto group = weak.lock();
        if (!group) return;
        std::lock_guard lock(group->mu);
        group->multicast_emulated = true;
      },
      [node, weak](const std::string& why) {
        auto group = weak.lock();
        if (!group) return;
        NodeState::fail_all(*group, ErrorCode::manager_lost,
                                    why + ": views can no longer change, so the group stops and pending broadcasts "
                                          "fail; start the group again with a live manager");
        node->link->wake();
      });
  s.progress = std::thread([node] { node->run(); });
}

}  // namespace detail

ProtocolConfig default_protocol(const Config& config) { return policy::protocol_for(config); }

Node::Node(Config config) : state_(std::make_shared<detail::NodeState>()) {
  if (config.group_size == 0) throw Error(ErrorCode::invalid_config, "Config::group_size must be at least 1");
  config.faults = detail::faults_with_environment(config.faults);
  state_->cfg = config;
  state_->protocol = config.protocol ? *config.protocol : default_protocol(config);
  if (auto why = policy::check(state_->protocol)) throw Error(ErrorCode::invalid_config, *why);
  if (config.transport == TransportKind::socket || config.transport == TransportKind::verbs) {
    const bool verbs = config.transport == TransportKind::verbs;
    if (verbs) detail::check_verbs_device(config.verbs);  // no device: fail now, naming the fixes
    const std::uint32_t transport_mtu = verbs ? config.verbs.mtu : config.socket.mtu;
    if (state_->protocol.mtu > transport_mtu)
      throw Error(ErrorCode::invalid_config, "ProtocolConfig::mtu (" + std::to_string(state_->protocol.mtu) +
                                                 ") is over the transport's MTU (" + std::to_string(transport_mtu) +
                                                 ", SocketOptions::mtu or VerbsOptions::mtu): lower it, or leave "
                                                 "Config::protocol empty");
    if (config.socket.embed_manager) {
      const auto [host, port] = socket::split_host_port(config.socket.manager, "manager address");
      try {
        state_->manager = std::make_unique<socket::ManagerServer>(host, port, socket::fresh_coordinator_config());
      } catch (const socket::TransportError& e) {
        throw Error(ErrorCode::transport_failed, e.what());
      }
    }
    return;  // the link and the progress thread come with join(): the manager assigns the id
  }
  state_->link = detail::make_inproc_link(config.fabric, config.faults);
  state_->progress = std::thread([s = state_.get()] { s->run(); });
}

Node::~Node() {
  state_->stop = true;
  if (state_->link) state_->link->wake();
  if (state_->progress.joinable()) state_->progress.join();
  for (auto& g : state_->snapshot())
    detail::NodeState::fail_all(*g, ErrorCode::closed, "the Node was destroyed before the message completed");
  if (state_->control) {
    state_->control->leave();
    state_->control->close();  // joins its reader: no callback (which reads `control`) runs after this
    state_->control.reset();
  }
  if (state_->link) state_->link->close();
  state_->manager.reset();
}

MemberId Node::id() const { return state_->link ? state_->link->id() : 0; }

Group Node::join(const std::string& name) {
  auto g = std::make_shared<detail::GroupState>();
  g->node = state_.get();
  if (state_->cfg.transport == TransportKind::socket || state_->cfg.transport == TransportKind::verbs) {
    detail::join_socket(*state_, name, g);
    return Group(g);
  }
  const GroupId gid = name_hash(name);
  {
    // Registered before the rendezvous so that no early frame of the group is lost...
    std::lock_guard lock(state_->groups_mu);
    if (state_->groups.count(gid) != 0) throw Error(ErrorCode::invalid_config, "this node already joined " + name);
  }
  auto view = inproc::Fabric::named(state_->cfg.fabric)
                  ->rendezvous(gid, id(), state_->cfg.group_size, state_->cfg.join_timeout);
  if (!view)
    throw Error(ErrorCode::join_timeout, "fewer than " + std::to_string(state_->cfg.group_size) + " members joined '" +
                                             name + "' in time: start the others, or lower Config::group_size");
  g->engine = std::make_unique<small::Engine>(gid, id(), *view, state_->protocol, detail::now_ns());
  {
    // ...and the engine exists before any frame is routed to it.
    std::lock_guard lock(state_->groups_mu);
    state_->groups[gid] = g;
  }
  return Group(g);
}

void Group::on_deliver(DeliverFn fn) {
  {
    std::lock_guard lock(state_->mu);
    state_->on_deliver = std::move(fn);
  }
  state_->node->link->wake();  // hand over deliveries held so far
}

void Group::on_view_change(ViewFn fn) {
  std::lock_guard lock(state_->mu);
  state_->on_view = std::move(fn);
}

View Group::view() const {
  std::lock_guard lock(state_->mu);
  return state_->engine->view();
}

MemberId Group::self() const { return state_->engine->self(); }

GroupStats Group::stats() const {
  GroupStats out;
  {
    std::lock_guard lock(state_->mu);
    const auto& e = state_->engine->stats();
    const auto& p = state_->engine->pipeline().stats();
    out.delivered = e.delivered;
    out.completed = e.completed;
    out.large_delivered = p.delivered;
    out.large_completed = p.completed;
    out.large_restarted = p.restarted;
    out.large_redeliveries_suppressed = p.redeliveries_suppressed;
    out.repairs_sent = e.repairs_sent;
    out.views_installed = e.views_installed;
    out.duplicates_dropped = e.duplicates_dropped + p.duplicate_segments;
    out.bad_packets_dropped = e.bad_packets() + p.invalid_dropped + state_->empty_blocks_dropped;
  }
  out.bad_packets_dropped += state_->node->link->bad_input();
  out.large_bytes_placed = state_->node->link->bytes_placed();
  out.large_regions_held = state_->node->link->regions_held();
  out.multicast_datagrams_sent = state_->node->link->multicast_datagrams_sent();
  out.link_bytes_sent = state_->node->link->link_bytes_sent();
  out.faults = detail::fault_stats(*state_->node->link);
  {
    std::lock_guard lock(state_->mu);
    const auto& probe = state_->engine->multicast_probe();
    out.multicast_emulated = state_->multicast_emulated;
    out.emulated_datagrams_sent = state_->emulated_datagrams;
    out.multicast_probes_sent = probe.probes_sent();
    out.multicast_probe = std::string(small::to_string(probe.state()));
    out.multicast_probe_silent = state_->probe_silent;
    out.multicast_probe_round_ns = probe.last_round_ns();
  }
  const auto& cfg = state_->node->protocol;
  out.ack_radix = cfg.radix;
  out.max_small_message = cfg.max_small_message;
  out.large_algorithm = std::string(large::to_string(cfg.large_algorithm));
  {
    std::lock_guard lock(state_->mu);
    out.last_block_size = state_->last_block_size;
  }
  return out;
}

bool Completion::spin_until_ready(std::chrono::nanoseconds spin) const {
  if (!done_.valid()) return false;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return true;
    if (std::chrono::steady_clock::now() - start >= spin) return false;
    std::this_thread::yield();
  }
}

Completion Group::broadcast(std::span<const std::byte> bytes, SendMode mode) {
  const auto& cfg = state_->node->protocol;
  if (bytes.size() > cfg.max_small_message) return broadcast_large(bytes, mode);
  auto msg = std::make_shared<const std::vector<std::byte>>(bytes.begin(), bytes.end());
  std::unique_lock lock(state_->mu);
  for (;;) {
    if (state_->closed || state_->engine->removed()) throw Error(state_->closed_code, state_->closed_why);
    if (!state_->paused && state_->engine->window_has_room(msg->size())) break;
    if (mode == SendMode::fail)
      throw Error(ErrorCode::window_full, state_->paused ? "a member is joining the group: broadcasts resume once it "
                                                           "is in (retry, or use SendMode::wait)"
                                                         : "sender window full: wait for a Completion or use SendMode::wait");
    state_->room.wait_for(lock, std::chrono::milliseconds(50));
  }
  Outbox out;
  const auto res = state_->engine->broadcast(msg, detail::now_ns(), out);
  if (res.error != small::BroadcastError::none)
    throw Error(ErrorCode::invalid_config, "broadcast refused by the engine");  // checked above: cannot happen
  std::promise<void> p;
  Completion c(res.seq, p.get_future().share(), state_->node->completion_spin());
  state_->pending.emplace(res.seq, std::move(p));
  state_->node->execute(*state_, out);
  lock.unlock();
  state_->node->link->wake();  // the progress thread runs the self-delivery and completion
  return c;
}

Completion Group::broadcast_large(std::span<const std::byte> bytes, SendMode mode) {
  const auto& cfg = state_->node->protocol;
  if (bytes.size() > cfg.max_large_message)
    throw Error(ErrorCode::message_too_large, "message of " + std::to_string(bytes.size()) +
                                                  " bytes is over the limit of " +
                                                  std::to_string(cfg.max_large_message) +
                                                  " (raise ProtocolConfig::max_large_message on every member)");
  auto buf = std::make_shared<std::vector<std::byte>>(bytes.begin(), bytes.end());
  std::unique_lock lock(state_->mu);
  for (;;) {
    if (state_->closed || state_->engine->removed()) throw Error(state_->closed_code, state_->closed_why);
    if (!state_->paused && state_->engine->pipeline().queued() < state_->engine->pipeline().config().large_queue_limit)
      break;
    if (mode == SendMode::fail)
      throw Error(ErrorCode::window_full, state_->paused ? "a member is joining the group: broadcasts resume once it "
                                                           "is in (retry, or use SendMode::wait)"
                                                         : "large-message queue full: wait for a Completion or use "
                                                           "SendMode::wait");
    state_->room.wait_for(lock, std::chrono::milliseconds(50));
  }
  // The buffer is in place before the engine can name it in a SendBlock.
  const Seq seq = state_->engine->pipeline().next_seq();
  state_->large[{state_->engine->self(), seq}] = buf;
  Outbox out;
  const std::uint64_t block = policy::block_size_for(cfg, buf->size());
  const auto res = state_->engine->broadcast_large(buf->size(), detail::now_ns(), out, block);
  if (res.error == large::LargeError::none) state_->last_block_size = block;
  if (res.error != large::LargeError::none || res.seq != seq) {
    state_->large.erase({state_->engine->self(), seq});
    throw Error(ErrorCode::invalid_config, "large broadcast refused by the engine");  // checked above
  }
  std::promise<void> p;
  Completion c(res.seq, p.get_future().share(), state_->node->completion_spin());
  state_->pending_large.emplace(res.seq, std::move(p));
  state_->node->execute(*state_, out);
  lock.unlock();
  state_->node->link->wake();
  return c;
}

}  // namespace hmcast
