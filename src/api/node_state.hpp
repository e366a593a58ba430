// What a Node and its Group share: the group's runtime under one lock, the
// Completions waiting, what the application has yet to see, and the progress
// thread that runs the runtime and the callbacks.
//
// Locking: the runtime is guarded by GroupState::mu; whoever calls it (the
// progress thread, a user thread in broadcast(), the control client's thread with
// a view) sends the resulting frames at once under that lock, and queues what the
// application sees (deliveries, completions, view changes) for the progress
// thread, which runs callbacks with no lock held but GroupState::callbacks_mu, so
// callbacks may call broadcast() and Group::leave() can wait for the one running.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/completion_board.hpp"
#include "auth/group_key.hpp"
#include "core/actions.hpp"
#include "hmcast/node.hpp"
#include "runtime/runtime.hpp"
#include "transport/control_client.hpp"
#include "transport/transport.hpp"

namespace hmcast::socket {
class ManagerServer;
}

#ifdef HMCAST_HAVE_ZOOKEEPER
namespace hmcast::zk {
class StandingManager;
}
#endif

namespace hmcast::detail {

TimeNs now_ns();

/// The small message a thread making a round waits for (NodeState::round()), if any.
struct Awaited {
  const CompletionBoard* board = nullptr;
  Seq seq = 0;
  [[nodiscard]] bool settled() const { return board != nullptr && board->settled(seq); }
};

struct GroupState {
  std::mutex mu;
  std::condition_variable room;  // signalled when a completion frees window space, or the group closes
  std::unique_ptr<runtime::Runtime> runtime;
  /// The small path's completions (in order: one number); the large path's, each its own.
  std::shared_ptr<CompletionBoard> small_done = std::make_shared<CompletionBoard>();
  std::map<Seq, std::promise<void>> pending_large;
  AppEvents to_app;  // deliveries, completions, views: for the progress thread
  std::size_t views_queued = 0;  // views in to_app (queue_for_app counts them in)
  std::size_t views_held = 0;    // of those, the ones run_callbacks() held for on_view_change()
  /// run_callbacks() took events from to_app and has not finished them: a completion
  /// queued now would overtake them (queue_for_app()).
  bool handing_over = false;
  /// A completion settled by queue_for_app(): room waiters are told once, at the end
  /// of the round (or of the call into the runtime, outside a round), not per message.
  bool room_due = false;
  /// What one call into the runtime produced, until queue_for_app() moves it to
  /// to_app: kept, like to_app, so their capacity is reused (no allocation per message).
  AppEvents produced;
  // Shared, not copied: every round takes them, and copying a std::function that
  // captures more than a pointer or two allocates.
  std::shared_ptr<const Group::DeliverFn> on_deliver;
  std::shared_ptr<const Group::ViewFn> on_view;
  Group::StoppedFn on_stopped;
  bool stop_reported = false;  // on_stopped ran (a stop the application made, ErrorCode::closed, never runs it)
  bool closed = false;
  ErrorCode closed_code = ErrorCode::removed;
  std::string closed_why = "this member is no longer in the group; join again";
  NodeState* node = nullptr;

  /// Held while a callback runs; Group::leave() takes it to wait for the running one.
  std::mutex callbacks_mu;
  /// Set by Group::leave(): no callback of this group runs any more.
  std::atomic<bool> callbacks_stopped{false};
};

/// Memory the application lent to the runtime (Group::broadcast_from,
/// Group::lend_receive): `released` turns true when the runtime's last hold on it
/// (the lender token made by lender_for) goes.
struct Lending {
  std::atomic<bool> released{false};
};

/// The token the runtime holds while it may touch `memory`: its end sets `l.released`.
std::shared_ptr<const void> lender_for(const void* memory, std::shared_ptr<Lending> l);

/// Waits until `l` is released or `deadline` passes (making progress meanwhile
/// with Progress::caller); true if released.
bool wait_released(GroupState& g, const Lending& l, std::chrono::steady_clock::time_point deadline);

/// Whether this thread is running a callback of `g` (Group::leave() must not wait
/// for the callback it is called from).
bool in_callback_of(const GroupState& g);

/// The group key a Node uses: Config::key, else the file Config::key_file names, else
/// the file HMCAST_KEY_FILE names, else none. Throws hmcast::Error(invalid_config)
/// when both are set or the file cannot be used (auth::read_key_file says why).
std::optional<auth::GroupKey> group_key_of(const Config& config);

struct NodeState {
  Config cfg;
  ProtocolConfig protocol;
  std::unique_ptr<socket::ManagerServer> manager;           // socket or verbs with embed_manager
#ifdef HMCAST_HAVE_ZOOKEEPER
  std::unique_ptr<zk::StandingManager> standing;  // embed_manager with zookeeper: this member may coordinate
#endif
  /// The group key (Config::key, key_file or HMCAST_KEY_FILE), if the group has one.
  std::optional<auth::GroupKey> key;
  std::unique_ptr<transport::ControlClient> control;        // this member's view authority
  std::unique_ptr<transport::Link> link;                    // once join() has an id
  std::shared_ptr<GroupState> group;                        // once join() returned
  std::atomic<bool> stop{false};
  std::thread progress;
  /// A wake-up of the progress thread is on its way (the link's eventfd was written
  /// and the thread has not started its next round since): later ones may be skipped.
  std::atomic<bool> wake_pending{false};

  /// Wakes the progress thread unless a wake-up is already pending: a sender
  /// streaming small messages would otherwise pay a system call per broadcast,
  /// while the thread handles everything queued in one round anyway.
  void wake_progress() {
    if (!wake_pending.exchange(true, std::memory_order_acq_rel)) link->wake();
  }

  /// How long a Completion polls before it sleeps: the transport's busy-poll window
  /// (small messages: as far as the progress thread's polling may stretch), so an
  /// application thread waiting on a broadcast is as awake as the progress thread.
  [[nodiscard]] std::chrono::nanoseconds completion_spin(bool large) const;
  /// Hands `app` (what the runtime produced) to the progress thread, and clears it. g.mu held.
  static void queue_for_app(GroupState& g, AppEvents& app);
  /// Calls `call(events)` (a call into g's runtime) with g.produced, and hands what
  /// it produced to the progress thread. g.mu held.
  template <class Call>
  static void feed(GroupState& g, Call&& call) {
    g.produced.clear();  // left over when a transport threw: dropped, as before
    call(g.produced);
    queue_for_app(g, g.produced);
    if (t_round_of != &g) tell_room(g);
  }
  /// Wakes threads waiting for window space if a completion freed some (g.mu held).
  static void tell_room(GroupState& g) {
    if (!g.room_due) return;
    g.room_due = false;
    g.room.notify_all();  // under g.mu: a sender between its check and its wait is not missed
  }
  /// The group whose round this thread is making, if any (that round tells room
  /// waiters at its end).
  static thread_local const GroupState* t_round_of;
  /// The progress thread (Progress::thread): rounds until the Node stops.
  void run();
  /// One round: waits on the link until input or `limit` (or the next timer), feeds
  /// the runtime what came, fires due timers, runs the callbacks. Whoever holds
  /// round_mu: the progress thread, a thread borrowing progress (borrow_progress), or
  /// (Progress::caller) the application's.
  ///
  /// `awaited`: the small message a thread making this round waits for. Once it is
  /// settled the drain stops looking for more input (what came stays in the link
  /// for the next round): the waiter returns sooner, one empty look (a system call
  /// on the socket) earlier. Everything the round took in is still handed on.
  void round(std::chrono::steady_clock::time_point limit, Awaited awaited = {});
  /// Progress::thread: an application thread waiting for small message `seq` of
  /// `board` makes the rounds itself (callbacks included) until it is settled or
  /// `until`, while the progress thread stands aside. On a host whose processes each
  /// have a core, handing the ACK from the progress thread to the waiting thread
  /// costs more than the rest of the message, as for MPI ranks, which make progress
  /// inside their calls. Whether `seq` is settled. Inside a callback (or once the
  /// Node stops) it makes no round: the caller polls and sleeps as before.
  bool borrow_progress(const CompletionBoard& board, Seq seq, std::chrono::steady_clock::time_point until);
  /// Threads borrowing progress now. The progress thread parks while there are any,
  /// and looks again every park period. A borrower whose message completed leaves
  /// without a system call (a sender waiting for each message borrows again within
  /// microseconds), so what arrives after it left waits at most that long; one that
  /// gives up, and every application thread about to sleep on the group, wakes it.
  std::atomic<int> borrowers{0};
  std::mutex park_mu;
  std::condition_variable parked;
  std::atomic<bool> is_parked{false};  // set under park_mu
  /// Wakes the progress thread if it is parked (a system call only then).
  void unpark_if_parked() {
    if (!is_parked.load(std::memory_order_seq_cst)) return;
    { std::lock_guard lock(park_mu); }  // a thread between its check and its wait holds it
    parked.notify_all();
  }
  /// The park period: at most the transport's busy-poll window, and short enough
  /// that an arrival after the last borrower left waits little.
  [[nodiscard]] std::chrono::nanoseconds park_period() const;
  /// A round until `limit` unless another thread is in one (then this one yields:
  /// that round hands on what it finds); whether it made one.
  bool try_round(std::chrono::steady_clock::time_point limit, Awaited awaited = {});
  /// Progress::caller: a round until `limit` unless another thread is in one (then
  /// this one yields: that round hands on what it finds). Throws invalid_config from
  /// inside a callback, whose round can never end while it waits.
  /// Whether it made a round.
  bool drive(std::chrono::steady_clock::time_point limit, Awaited awaited = {});
  /// This NodeState, for the Completions that make its group progress.
  std::weak_ptr<NodeState> self;
  [[nodiscard]] bool caller_progress() const { return cfg.progress == Progress::caller; }
  /// Progress::caller: whoever makes a round holds this.
  std::mutex round_mu;
  /// The transport failed (round() said so to every Completion): no more rounds.
  std::atomic<bool> transport_failed{false};
  void dispatch(GroupState& g, transport::Inbound& in);
  /// Where an arriving Block's payload goes (socket placement), if the runtime allows it.
  std::optional<transport::Placement> place_block(MemberId from, std::span<const std::byte> head, std::size_t size);
  /// Runs the callbacks and settles the Completions for what the runtime queued.
  void run_callbacks(GroupState& g);
  /// Fulfils (or fails, with `error`) the Completion of large message `seq`, and wakes
  /// senders waiting for room.
  static void settle_large(GroupState& g, Seq seq, std::exception_ptr error);
  /// Fails every pending Completion and later broadcast with `code` and `why`.
  static void fail_all(GroupState& g, ErrorCode code, const std::string& why);
};

}  // namespace hmcast::detail
