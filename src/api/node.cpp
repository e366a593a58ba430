// The Node: one transport, one group, one progress thread over the group's runtime.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

#include "api/completion_board.hpp"
#include "api/node_state.hpp"
#include "api/spin_wait.hpp"
#include "core/overloaded.hpp"
#include "policy/defaults.hpp"
#include "transport/faulty/fault_config.hpp"
#include "transport/host_identity.hpp"
#include "transport/faulty/faulty_link.hpp"
#include "transport/inproc/inproc_control.hpp"
#include "transport/links.hpp"
#include "transport/socket/manager_client.hpp"
#ifdef HMCAST_HAVE_ZOOKEEPER
#include "transport/zookeeper/zk_coordination.hpp"
#include "transport/zookeeper/zk_failover_control.hpp"
#endif
#include "transport/socket/manager_server.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast {

namespace detail {

TimeNs now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::chrono::nanoseconds NodeState::completion_spin(bool large) const {
  // A small message's completion comes within a few round trips: waiting for it as
  // long as the progress thread stretches its polling keeps this thread's wake-up
  // off the path. A large one takes longer than any polling is worth.
  if (cfg.transport == TransportKind::socket || cfg.transport == TransportKind::shm)
    return poll_window(cfg.socket.completion,
                       large ? cfg.socket.busy_poll : std::max(cfg.socket.busy_poll, cfg.socket.busy_poll_max));
  if (cfg.transport == TransportKind::verbs) return poll_window(cfg.verbs.completion, cfg.verbs.busy_poll);
  return std::chrono::nanoseconds{0};
}

void NodeState::queue_for_app(GroupState& g, AppEvents& app) {
  for (auto& a : app) {
    // A completion with nothing queued ahead of it settles now: its waiter need not
    // wait for the rest of the round (the drain, the timers, the callbacks). Behind
    // other events it waits its turn, so the application still sees every event in
    // the order produced (its own delivery before its completion).
    if (const auto* c = std::get_if<action::Completed>(&a); c != nullptr && g.to_app.empty() && !g.handing_over) {
      g.small_done->complete_through(c->seq);
      g.room_due = true;
      continue;
    }
    if (std::holds_alternative<action::ViewInstalled>(a)) ++g.views_queued;
    g.to_app.push_back(std::move(a));
  }
  app.clear();  // keeps its capacity: app is GroupState::produced, or one broadcast's
}

namespace {
// Inputs handled before the progress thread turns to timers and callbacks. Large
// enough that a burst is ACKed once (on_drained), small enough that a delivery waits
// for at most one round.
constexpr std::size_t kDrainRound = 256;
// Views held for an application that has not set on_view_change(): enough for any
// churn between join() and setting it, a bound for one that never sets it.
constexpr std::size_t kMaxHeldViews = 64;
// Callbacks run under one hold of GroupState::callbacks_mu (run_callbacks()).
constexpr std::size_t kCallbacksPerLock = 64;
}  // namespace

void NodeState::run() {
  // A round ends at least every 50 ms, so the thread notices stop.
  while (!stop.load() && !transport_failed.load()) {
    if (borrowers.load(std::memory_order_seq_cst) > 0) {
      std::unique_lock lock(park_mu);
      is_parked.store(true, std::memory_order_seq_cst);
      parked.wait_for(lock, park_period(),
                      [&] { return stop.load() || borrowers.load(std::memory_order_seq_cst) == 0; });
      is_parked.store(false, std::memory_order_seq_cst);
      continue;
    }
    std::unique_lock lock(round_mu, std::try_to_lock);
    if (!lock) {
      std::this_thread::yield();  // a borrower between two of its rounds
      continue;
    }
    if (borrowers.load(std::memory_order_seq_cst) > 0) continue;  // came meanwhile: park
    round(std::chrono::steady_clock::now() + std::chrono::milliseconds(50));
  }
}

std::chrono::nanoseconds NodeState::park_period() const {
  // Only the socket and shm transports lend their rounds (group.cpp, borrowing()).
  return std::clamp<std::chrono::nanoseconds>(cfg.socket.busy_poll, std::chrono::microseconds(10),
                                              std::chrono::microseconds(50));
}

thread_local const GroupState* NodeState::t_round_of = nullptr;

namespace {
// The group whose callbacks this thread is running, if any.
thread_local const GroupState* t_in_callbacks = nullptr;

/// Sets a thread's mark (which group's round or callbacks it is in) for a scope,
/// and puts back the one it found.
class ThreadMark {
 public:
  ThreadMark(const GroupState*& mark, const GroupState* g) : mark_(mark), outer_(mark) { mark_ = g; }
  ~ThreadMark() { mark_ = outer_; }
  ThreadMark(const ThreadMark&) = delete;
  ThreadMark& operator=(const ThreadMark&) = delete;

 private:
  const GroupState*& mark_;
  const GroupState* outer_;
};
}  // namespace

bool in_callback_of(const GroupState& g) { return t_in_callbacks == &g; }

bool NodeState::drive(std::chrono::steady_clock::time_point limit, Awaited awaited) {
  HMCAST_ASSERT(caller_progress());
  if (t_in_callbacks != nullptr)
    throw Error(ErrorCode::invalid_config,
                "a callback waited for progress (Completion::get, Group::poll or a broadcast waiting for room): with "
                "Progress::caller the callbacks run inside that progress; broadcast with SendMode::fail from a callback "
                "and wait elsewhere");
  if (transport_failed.load()) return false;
  return try_round(limit, awaited);
}

bool NodeState::try_round(std::chrono::steady_clock::time_point limit, Awaited awaited) {
  std::unique_lock lock(round_mu, std::try_to_lock);
  if (!lock) {
    std::this_thread::yield();  // another thread's round hands on what it finds
    return false;
  }
  round(limit, awaited);
  return true;
}

bool NodeState::borrow_progress(const CompletionBoard& board, Seq seq, std::chrono::steady_clock::time_point until) {
  HMCAST_ASSERT(!caller_progress());
  const auto settled = [&] { return board.settled(seq); };
  // Inside a callback this thread's round is the one it would need: the caller polls.
  if (t_in_callbacks != nullptr || stop.load()) return settled();
  borrowers.fetch_add(1, std::memory_order_seq_cst);
  wake_progress();  // the progress thread leaves its round's wait, and then parks
  while (!settled() && !stop.load() && !transport_failed.load() && std::chrono::steady_clock::now() < until) {
    // The only borrower polls alone (the progress thread parks): it may keep its
    // CPU between polls where two polling threads would share it.
    link->set_sole_poller(borrowers.load(std::memory_order_relaxed) == 1);
    (void)try_round(until, Awaited{&board, seq});
  }
  link->set_sole_poller(false);
  const bool done = settled();
  // A waiter that gives up goes to sleep on the group: the progress thread takes over now.
  if (borrowers.fetch_sub(1, std::memory_order_seq_cst) == 1 && !done) unpark_if_parked();
  return done;
}

void NodeState::round(std::chrono::steady_clock::time_point limit, Awaited awaited) {
  GroupState& g = *group;
  const ThreadMark in_round(t_round_of, &g);
  bool queued = false;
  TimeNs next = kNever;
  {
    std::lock_guard lock(g.mu);
    queued = !g.to_app.empty();
    next = g.runtime->engine().next_wakeup();
  }
  // What waits for the application (a broadcast's own delivery, queued by the
  // caller) runs before the wait, while the network works, not after the next arrival.
  if (queued) {
    run_callbacks(g);
    std::lock_guard lock(g.mu);
    next = g.runtime->engine().next_wakeup();  // a callback may have broadcast
  }
  // From here on a wake-up must reach us again: whatever was queued before this
  // point is seen below (the link still holds the wake-up sent for it, as a flag or
  // a readable eventfd: at worst one round too many).
  wake_pending.store(false, std::memory_order_release);
  const auto now_tp = std::chrono::steady_clock::now();
  auto deadline = std::max(limit, now_tp);
  if (next != kNever) {
    const auto until = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(next));
    deadline = std::min(deadline, std::max(until, now_tp));
  }
  std::unique_lock<std::mutex> held;
  TimeNs now = 0;
  try {
    auto in = link->wait(deadline);
    const bool had_input = in.has_value();
    // Drain what is queued, in bounded rounds: input that keeps arriving (a sender
    // that sends again as soon as we ACK) must not hold back timers and the
    // application's deliveries, which wait below.
    for (std::size_t n = 1; in && n < kDrainRound; ++n) {
      dispatch(g, *in);
      link->recycle(std::move(in->bytes));  // the engine copied what it keeps
      in = awaited.settled() ? std::nullopt : link->poll();
    }
    if (in) {
      dispatch(g, *in);
      link->recycle(std::move(in->bytes));
    }
    // The drain's end and the timers below under one lock and one clock reading.
    held = std::unique_lock(g.mu);
    now = now_ns();
    if (had_input) feed(g, [&](AppEvents& app) { g.runtime->on_drained(now, app); });
  } catch (const Error& e) {
    if (held.owns_lock()) held.unlock();
    // The transport is gone; nothing can complete any more.
    transport_failed.store(true);
    fail_all(g, e.code(), e.what());
    run_callbacks(g);
    return;
  }
  if (now >= g.runtime->engine().next_wakeup()) feed(g, [&](AppEvents& app) { g.runtime->on_timer(now, app); });
  tell_room(g);
  held.unlock();
  run_callbacks(g);
}

void NodeState::dispatch(GroupState& g, transport::Inbound& in) {
  std::lock_guard lock(g.mu);
  if (!in.datagram) {
    feed(g, [&](AppEvents& app) { g.runtime->on_frame(in.from, in.bytes, in.placed, now_ns(), app); });
    return;
  }
  if (in.placed) {  // its payload is in its message's buffer already: `bytes` is its head
    feed(g, [&](AppEvents& app) {
      g.runtime->on_placed_datagram(in.bytes, in.placed_size, in.placed_at, now_ns(), app);
    });
    in.placed_into.reset();
    return;
  }
  // The datagram becomes shared: the small messages that arrived whole in it stay in
  // it until their last holder (the stream's window, the application) lets go. When
  // nobody kept it (an ACK, a duplicate), its buffer goes back to the link.
  auto owner = std::make_shared<std::vector<std::byte>>(std::move(in.bytes));
  feed(g, [&](AppEvents& app) { g.runtime->on_datagram(*owner, now_ns(), app, owner); });
  if (owner.use_count() == 1) in.bytes = std::move(*owner);
}

std::optional<transport::Placement> NodeState::place_block(MemberId from, std::span<const std::byte> head,
                                                          std::size_t size) {
  // Runs inside the transport's wait() with the transport's lock held, so it only
  // try-locks (a user thread in broadcast() holds the group's lock while it calls
  // the transport): when busy, the frame arrives whole and is copied as usual.
  auto g = group;
  if (!g) return std::nullopt;
  std::unique_lock lock(g->mu, std::try_to_lock);
  if (!lock || !g->runtime) return std::nullopt;
  return g->runtime->placement(from, head, size);
}

void NodeState::run_callbacks(GroupState& g) {
  // Marks this thread as inside g's callbacks (Group::leave, drive) until it returns.
  const ThreadMark in_callbacks(t_in_callbacks, &g);
  AppEvents todo;
  std::shared_ptr<const Group::DeliverFn> deliver;
  std::shared_ptr<const Group::ViewFn> view;
  {
    std::lock_guard lock(g.mu);
    // Most rounds of a sender waiting for ACKs hand nothing on: no callbacks to take.
    if (g.to_app.empty() && !(g.closed && !g.stop_reported)) return;
    deliver = g.on_deliver;
    view = g.on_view;
    HMCAST_ASSERT(g.views_held <= g.views_queued);  // held views stay in to_app
    const bool hold_deliveries = !deliver && !g.callbacks_stopped;
    const bool hold_views = !view && !g.callbacks_stopped;
    // Views are rare: a round with none to hold or trim hands the queue over whole,
    // keeping its capacity (no allocation per round for an application that never
    // sets on_view_change()).
    if (hold_deliveries || (g.views_queued > 0 && (hold_views || g.views_held > 0))) {
      // Hold each kind of event until the application sets its callback: a view that
      // came between join() and on_view_change() (a member killed at once) is not
      // lost. Completions and the rest pass on. An application that never listens
      // for views must not grow this list for ever: of the views not yet handed
      // over, the oldest past kMaxHeldViews go.
      std::size_t drop = g.views_queued > kMaxHeldViews ? g.views_queued - kMaxHeldViews : 0;
      AppEvents keep;
      g.views_held = 0;
      for (auto& a : g.to_app) {
        const bool is_view = std::holds_alternative<action::ViewInstalled>(a);
        if (is_view && drop > 0) {
          --drop;
          continue;
        }
        const bool delivery =
            std::holds_alternative<action::Deliver>(a) || std::holds_alternative<action::DeliverLarge>(a);
        const bool kept = (delivery && hold_deliveries) || (is_view && hold_views);
        if (kept && is_view) ++g.views_held;
        // A held delivery in lent memory (Group::broadcast_from, lend_receive) gets a
        // copy of its own: the lender waits for the memory, not for on_deliver().
        if (auto* dl = std::get_if<action::DeliverLarge>(&a); kept && dl != nullptr && dl->message.lent())
          dl->message = dl->message.copied();
        (kept ? keep : todo).push_back(std::move(a));
      }
      g.views_queued = g.views_held;
      g.to_app.swap(keep);
    } else {
      todo.swap(g.to_app);
      g.views_queued = 0;
    }
    g.handing_over = !todo.empty();
  }
  bool room = false;  // a small message completed: its window space is free
  // A user callback runs with callbacks_mu held, and only until Group::leave(). The
  // lock is kept from one callback to the next (a stream's deliveries come hundreds
  // to a round), let go every kCallbacksPerLock callbacks so that leave() waits for
  // few, and before anything else the loop does.
  std::unique_lock cb(g.callbacks_mu, std::defer_lock);
  std::size_t under_lock = 0;
  auto user = [&](auto&& call) {
    if (!cb.owns_lock()) cb.lock();
    if (!g.callbacks_stopped) call();
    if (++under_lock % kCallbacksPerLock == 0) cb.unlock();
  };
  auto no_user = [&] {
    if (cb.owns_lock()) cb.unlock();
  };
  for (auto& a : todo) {
    if (!std::holds_alternative<action::Deliver>(a) && !std::holds_alternative<action::DeliverLarge>(a) &&
        !std::holds_alternative<action::ViewInstalled>(a))
      no_user();
    std::visit(
        Overloaded{
            [&](action::Deliver& d) {
              // The event is spent after this: its hold on the buffer moves to the Delivery.
              const auto bytes = d.message.bytes();
              user([&] { (*deliver)(Delivery{d.sender, d.seq, false, bytes, std::move(d.message).take_owner()}); });
            },
            [&](action::DeliverLarge& d) {
              // Our own message from lent memory: no buffer to keep (the bytes are the
              // lender's, valid during the callback: broadcast_from() waits for it).
              user([&] {
                (*deliver)(
                    Delivery{d.sender, d.seq, true, d.message.bytes(), d.message.lent() ? nullptr : d.message.owner()});
              });
            },
            [&](action::Completed& c) {
              g.small_done->complete_through(c.seq);
              room = true;
            },
            [&](action::CompletedLarge& c) { settle_large(g, c.seq, nullptr); },
            [&](action::FailedLarge& f) {
              settle_large(g, f.seq, std::make_exception_ptr(Error(ErrorCode::removed, f.reason)));
            },
            [&](action::ViewInstalled& v) {
              if (view) user([&] { (*view)(v.view, v.left); });
            },
            [&](action::Removed&) {
              fail_all(g, ErrorCode::removed,
                       "this member was removed from the group (the others stopped hearing from it); join again");
            },
        },
        a);
  }
  no_user();
  // The group stopped for this member by no choice of its own: say so, once.
  Group::StoppedFn stopped;
  std::optional<Error> why;
  todo.clear();
  {
    std::lock_guard lock(g.mu);
    g.handing_over = false;
    // Our buffer goes back for the next events to reuse, unless one as large is there.
    if (g.to_app.empty() && g.to_app.capacity() < todo.capacity()) g.to_app.swap(todo);
    if (room) g.room.notify_all();  // under g.mu: a sender between its check and its wait is not missed
    if (g.closed && !g.stop_reported && g.closed_code != ErrorCode::closed && g.on_stopped) {
      g.stop_reported = true;
      stopped = g.on_stopped;
      why.emplace(g.closed_code, g.closed_why);
    }
  }
  if (stopped) {
    std::lock_guard stop_cb(g.callbacks_mu);
    if (!g.callbacks_stopped) stopped(*why);
  }
}

void NodeState::settle_large(GroupState& g, Seq seq, std::exception_ptr error) {
  std::lock_guard lock(g.mu);
  auto it = g.pending_large.find(seq);
  if (it != g.pending_large.end()) {
    if (error) it->second.set_exception(error);
    else it->second.set_value();
    g.pending_large.erase(it);
  }
  g.room.notify_all();
}

void NodeState::fail_all(GroupState& g, ErrorCode code, const std::string& why) {
  std::lock_guard lock(g.mu);
  if (!g.closed) {
    g.closed_code = code;
    g.closed_why = why;
  }
  g.closed = true;
  g.small_done->fail(std::make_exception_ptr(Error(code, why)));
  for (auto& [seq, p] : g.pending_large) p.set_exception(std::make_exception_ptr(Error(code, why)));
  g.pending_large.clear();
  g.room.notify_all();
}

std::optional<auth::GroupKey> group_key_of(const Config& config) {
  if (config.key && !config.key_file.empty())
    throw Error(ErrorCode::invalid_config, "Config::key and Config::key_file are both set: set one");
  return auth::resolve_key(config.key, config.key_cipher, config.key_file);
}

namespace {

/// The transport for member `welcome.member` of the group the coordinator welcomed
/// us to, sealing its frames under `key` where the transport's fabric is not trusted.
std::unique_ptr<transport::Link> make_link(const Config& cfg, const membership::Welcome& welcome,
                                           const std::optional<auth::GroupKey>& key) {
  const auth::GroupKey* k = key ? &*key : nullptr;
  // The progress thread polls, and so does the application's thread waiting on a
  // completion; in the caller's mode the application's alone. On shm a waiter that
  // borrows the progress thread's rounds parks that thread while it polls
  // (Config::borrow_progress): one poller, as in the caller's mode. Not on the
  // socket: there a thread that keeps its CPU starves the kernel's TCP work for
  // large messages on the same CPU (docs/benchmarks.md, "Borrowed progress").
  const bool one_poller = cfg.progress == Progress::caller ||
                          (cfg.transport == TransportKind::shm && cfg.borrow_progress != BorrowProgress::never);
  const std::uint32_t pollers = one_poller ? 1 : 2;
  switch (cfg.transport) {
    case TransportKind::inproc:
      return transport::make_inproc_link(cfg.fabric, welcome.group_id, welcome.member, cfg.socket.large_pool_bytes,
                                         cfg.faults, k);
    case TransportKind::socket:
      if (cfg.socket.share_memory)
        return transport::make_host_link(welcome.member, welcome.group_id, welcome.multicast_address,
                                         welcome.multicast_port, cfg.socket, cfg.shm, cfg.faults, k,
                                         !cfg.host_identity.empty(), pollers);
      return transport::make_socket_link(welcome.member, welcome.multicast_address, welcome.multicast_port, cfg.socket,
                                         cfg.faults, k, welcome.group_id, pollers);
    case TransportKind::verbs:
      return transport::make_verbs_link(welcome.member, welcome.multicast_address, cfg.verbs, cfg.faults);
    case TransportKind::shm:
      return transport::make_shm_link(welcome.member, welcome.group_id, cfg.socket, cfg.shm, cfg.faults, pollers);
  }
  throw Error(ErrorCode::invalid_config, "unknown Config::transport");
}

}  // namespace

}  // namespace detail

ProtocolConfig default_protocol(const Config& config) {
  // The policy leaves room for tags when the group has a key: one named by a file
  // (or by HMCAST_KEY_FILE) counts, though only the Node reads it.
  const char* env = std::getenv("HMCAST_KEY_FILE");
  if (config.key || (config.key_file.empty() && (env == nullptr || *env == '\0'))) return policy::protocol_for(config);
  Config keyed = config;
  keyed.key.emplace();
  return policy::protocol_for(keyed);
}

Node::Node(Config config) : state_(std::make_shared<detail::NodeState>()) {
  state_->self = state_;
  if (config.group_size == 0) throw Error(ErrorCode::invalid_config, "Config::group_size must be at least 1");
  config.faults = transport::faults_with_environment(config.faults);
  state_->key = detail::group_key_of(config);
  if (state_->key) {
    config.key = state_->key->bytes;  // the policy leaves room for tags (policy::protocol_for)
    config.key_cipher = state_->key->cipher;
    config.key_file.clear();
  }
  state_->cfg = config;
  state_->protocol = config.protocol ? *config.protocol : default_protocol(config);
  if (auto why = policy::check(state_->protocol)) throw Error(ErrorCode::invalid_config, *why);
  if (config.transport == TransportKind::inproc) return;
  const bool verbs = config.transport == TransportKind::verbs;
  if (verbs) transport::check_verbs_device(config.verbs);  // no device: fail now, naming the fixes
  const std::uint32_t transport_mtu = policy::transport_mtu(config);
  if (state_->protocol.mtu > transport_mtu)
    throw Error(ErrorCode::invalid_config, "ProtocolConfig::mtu (" + std::to_string(state_->protocol.mtu) +
                                               ") is over the transport's MTU (" + std::to_string(transport_mtu) +
                                               ", SocketOptions::mtu, VerbsOptions::mtu or ShmOptions::mtu): lower it, or leave "
                                               "Config::protocol empty");
  if (config.socket.embed_manager && !config.socket.zookeeper.empty()) {
#ifdef HMCAST_HAVE_ZOOKEEPER
    // This member stands for the coordinator's seat too: any member can take over.
    zk::StandingManager::Options so;
    so.ensemble = config.socket.zookeeper;
    so.root = config.socket.zookeeper_root;
    so.host = config.socket.interface_address;
    so.key = state_->key;
    state_->standing = std::make_unique<zk::StandingManager>(so);
#endif
  } else if (config.socket.embed_manager) {
    const auto [host, port] = socket::split_host_port(config.socket.manager, "manager address");
    try {
      state_->manager = std::make_unique<socket::ManagerServer>(host, port, socket::fresh_coordinator_config(),
                                                                socket::ManagerServer::ViewLog{}, socket::Succession{},
                                                                state_->key);
    } catch (const socket::TransportError& e) {
      throw Error(ErrorCode::transport_failed, e.what());
    }
  }
}

Node::~Node() {
  auto& s = *state_;
  s.stop = true;
  if (s.link) s.link->wake();
  {
    std::lock_guard lock(s.park_mu);  // a thread between its check of stop and its wait holds it
  }
  s.parked.notify_all();  // whether or not it is parked yet: it checks stop under park_mu
  if (s.progress.joinable()) s.progress.join();
  // A thread borrowing progress (Completion::get) sees stop after its round.
  while (s.borrowers.load() > 0) {
    if (s.link) s.link->wake();
    std::this_thread::yield();
  }
  if (s.group) detail::NodeState::fail_all(*s.group, ErrorCode::closed, "the Node was destroyed before the message completed");
  if (s.control) {
    s.control->leave();
    s.control->close();  // joins its thread: no view handler (which reads the runtime) runs after this
  }
  if (s.link) s.link->close();
  s.manager.reset();
#ifdef HMCAST_HAVE_ZOOKEEPER
  s.standing.reset();
#endif
}

MemberId Node::id() const { return state_->link ? state_->link->id() : 0; }

Group Node::join(const std::string& name) {
  auto& s = *state_;
  if (s.control)
    throw Error(ErrorCode::invalid_config, "a Node joins one group: create another Node for '" + name + "'");
  const auto deadline = std::chrono::steady_clock::now() + s.cfg.join_timeout;
  if (s.cfg.transport == TransportKind::inproc) {
    s.control = std::make_unique<inproc::ControlClient>(s.cfg.fabric);
  } else if (!s.cfg.socket.zookeeper.empty()) {
#ifdef HMCAST_HAVE_ZOOKEEPER
    s.control = std::make_unique<zk::FailoverControlClient>(
        zk::FailoverOptions{s.cfg.socket.zookeeper, s.cfg.socket.zookeeper_root, s.cfg.socket.failover_timeout, s.key},
        deadline);
#else
    throw Error(ErrorCode::invalid_config, "SocketOptions::zookeeper is set but this hmcast was built without ZooKeeper: "
                                           "install libzookeeper-mt-dev and rebuild, or leave it empty");
#endif
  } else {
    const auto [host, port] = socket::split_host_port(s.cfg.socket.manager, "manager address");
    s.control = std::make_unique<socket::ManagerClient>(host, port, deadline, s.key ? &*s.key : nullptr);
  }
  const auto welcome = s.control->join(name, s.cfg.group_size, deadline);
  s.link = detail::make_link(s.cfg, welcome, s.key);
  s.link->set_block_placer([node = &s](MemberId from, std::span<const std::byte> head, std::size_t size) {
    return node->place_block(from, head, size);
  });
  s.control->listening(transport::listening_address(*s.link, s.cfg.socket.interface_address),
                       transport::listening_port(*s.link), transport::host_identity(s.cfg.host_identity));
  const auto first = s.control->wait_view(deadline);
  auto g = std::make_shared<detail::GroupState>();
  g->node = &s;
  g->runtime = std::make_unique<runtime::Runtime>(*s.link, *s.control, welcome.group_id, welcome.member, first,
                                                  s.protocol, detail::now_ns());
  if (s.cfg.transport != TransportKind::inproc && s.protocol.multicast_probe_deadline_ns > 0) {
    // Does our multicast reach everyone? (group/multicast_probe.hpp) The answers
    // come while the group already runs: until then, what multicast loses is repaired.
    std::lock_guard lock(g->mu);
    detail::NodeState::feed(*g, [&](AppEvents& app) { g->runtime->start_multicast_probe(detail::now_ns(), app); });
  }
  s.group = g;
  detail::NodeState* node = &s;
  std::weak_ptr<detail::GroupState> weak = g;
  s.control->start(
      [node, weak](const membership::ControlMessage& m) {
        auto group = weak.lock();
        if (!group) return;
        {
          std::lock_guard lock(group->mu);
          detail::NodeState::feed(*group, [&](AppEvents& app) { group->runtime->on_control(m, detail::now_ns(), app); });
          group->room.notify_all();  // a view that ends a flush lets broadcasts go on
        }
        node->link->wake();
      },
      [node, weak](const std::string& why) {
        auto group = weak.lock();
        if (!group) return;
        {
          // The coordinator closes a removed member's connection right after the view
          // without it: that is a removal (reported as such), not a lost manager.
          std::lock_guard lock(group->mu);
          if (group->runtime->engine().removed()) {
            node->link->wake();
            return;
          }
        }
        detail::NodeState::fail_all(*group, ErrorCode::manager_lost,
                                    why + ": views can no longer change, so the group stops and pending broadcasts "
                                          "fail; start the group again with a live manager");
        node->link->wake();
      });
  if (!s.caller_progress()) s.progress = std::thread([node] { node->run(); });
  return Group(g);
}

}  // namespace hmcast
