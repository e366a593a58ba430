// Group and Completion: broadcasts, callbacks, stats and leaving, over the
// group's runtime (api/node_state.hpp says who locks what).
#include <atomic>
#include <thread>

#include "api/completion_board.hpp"
#include "api/node_state.hpp"
#include "api/spin_wait.hpp"
#include "core/assert.hpp"
#include "policy/policy.hpp"
#include "small/fragmenter.hpp"
#include "transport/cpu_share.hpp"
#include "transport/faulty/faulty_link.hpp"
#include "transport/sealed/sealed_link.hpp"

namespace hmcast {

void Group::on_deliver(DeliverFn fn) {
  {
    std::lock_guard lock(state_->mu);
    state_->on_deliver = fn ? std::make_shared<const DeliverFn>(std::move(fn)) : nullptr;
  }
  state_->node->link->wake();  // hand over deliveries held so far
}

void Group::on_view_change(ViewFn fn) {
  std::lock_guard lock(state_->mu);
  state_->on_view = fn ? std::make_shared<const ViewFn>(std::move(fn)) : nullptr;
}

void Group::on_stopped(StoppedFn fn) {
  {
    std::lock_guard lock(state_->mu);
    state_->on_stopped = std::move(fn);
  }
  state_->node->link->wake();  // a stop that came before is reported now
}

View Group::view() const {
  std::lock_guard lock(state_->mu);
  return state_->runtime->engine().view();
}

MemberId Group::self() const { return state_->runtime->engine().self(); }

void Group::leave() {
  auto& g = *state_;
  auto* node = g.node;
  if (detail::in_callback_of(g)) {
    g.callbacks_stopped = true;  // from inside a callback: the one running is ours
  } else {
    std::lock_guard cb(g.callbacks_mu);  // waits for the callback running now, if any
    g.callbacks_stopped = true;
  }
  {
    std::lock_guard lock(g.mu);
    // What the callbacks captured goes now (a callback running on this thread runs
    // on its own copy, run_callbacks()), which also ends any cycle through a Group.
    g.on_deliver = nullptr;
    g.on_view = nullptr;
    g.on_stopped = nullptr;
    if (g.closed && g.closed_code == ErrorCode::closed) return;  // left already
  }
  detail::NodeState::fail_all(g, ErrorCode::closed, "this member left the group (Group::leave)");
  node->control->leave();  // the coordinator removes us by a new view
  node->link->wake();
}

GroupStats Group::stats() const {
  GroupStats out;
  const auto& link = *state_->node->link;
  {
    std::lock_guard lock(state_->mu);
    const auto& rt = *state_->runtime;
    const auto& e = rt.engine();
    const auto& small = e.small_path().stats();
    const auto& large = e.large_path().stats();
    const auto& admission = e.admission();
    out.delivered = small.delivered;
    out.completed = small.completed;
    out.large_delivered = large.delivered;
    out.large_completed = large.completed;
    out.large_restarted = large.restarted;
    out.large_redeliveries_suppressed = large.redeliveries_suppressed;
    out.large_commits_relayed = large.commits_relayed;
    out.large_delivered_on_relay = large.delivered_on_relay;
    out.large_uncommitted_discarded = large.uncommitted_discarded;
    out.repairs_sent = small.repairs_sent;
    out.views_installed = admission.views_installed;
    out.duplicates_dropped = small.duplicates_dropped + large.duplicate_segments;
    out.bad_packets_dropped = admission.bad_packets() + small.invalid_dropped + large.invalid_dropped + large.over_limit_dropped +
                              rt.stats().empty_blocks_dropped;
    const auto& probe = e.multicast_probe();
    out.multicast_emulated = e.multicast_emulated();
    out.emulated_datagrams_sent = e.sent().emulated_datagrams;
    out.batches_sent = e.sent().batches_sent;
    out.datagrams_batched = e.sent().datagrams_batched;
    out.small_fragments_placed = e.small_path().stats().fragments_placed;
    out.multicast_probes_sent = probe.probes_sent();
    out.multicast_probe = std::string(group::to_string(probe.state()));
    out.multicast_probe_silent = rt.probe_silent();
    out.multicast_probe_round_ns = probe.last_round_ns();
    const auto& cfg = e.config();
    out.ack_radix = cfg.radix;
    out.max_small_message = policy::small_route_for(cfg);
    out.large_algorithm = std::string(large::to_string(cfg.large_algorithm));
    out.last_block_size = rt.stats().last_block_size;
    out.hosts = rt.hosts().hosts;
    out.host_members = static_cast<std::uint32_t>(rt.hosts().local.size());
    out.host_leader = rt.hosts().leader == e.self();
  }
  out.bad_packets_dropped += link.bad_input();
  out.large_bytes_placed = link.bytes_placed();
  out.large_regions_held = link.regions_held();
  out.multicast_datagrams_sent = link.multicast_datagrams_sent();
  out.link_bytes_sent = link.link_bytes_sent();
  out.shm_locks_recovered = link.locks_recovered();
  out.shm_partial_frames_dropped = link.partial_frames_dropped();
  const auto log = link.log_stats();
  out.shm_datagrams_waited = log.waited;
  out.shm_multicast_overruns = log.overruns;
  out.shm_datagrams_copied = log.copied;
  out.faults = transport::fault_stats(link);
  const auto seal = transport::seal_stats(link);
  out.auth_failures = seal.auth_failures;
  out.replays_refused = seal.replays_refused;
  return out;
}

void Group::poll(std::chrono::nanoseconds max_wait) {
  auto* node = state_->node;
  if (!node->caller_progress()) return;
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = max_wait >= std::chrono::hours(24) ? now + std::chrono::hours(24) : now + max_wait;
  while (!node->drive(deadline) && std::chrono::steady_clock::now() < deadline && !node->transport_failed.load()) {
  }
}

bool Completion::settled() const {
  if (board_) return board_->settled(seq_);
  return done_.valid() && done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

void Completion::get() const {
  (void)wait_ns(std::chrono::nanoseconds::max());
  if (board_) board_->outcome(seq_);
  else done_.get();  // a default-constructed Completion throws std::future_error here
}

namespace {
/// The longest a waiter borrows the progress thread's rounds (the callbacks wait that
/// long at most): then it polls and sleeps as before.
constexpr std::chrono::nanoseconds kMaxBorrow = std::chrono::milliseconds(2);
}  // namespace

bool Completion::wait_ns(std::chrono::nanoseconds d) const {
  if (!board_ && !done_.valid()) return false;  // get() then says so (std::future_error)
  auto ready = [&] { return settled(); };
  const auto start = std::chrono::steady_clock::now();
  auto node = driver_.lock();
  if (node && !node->caller_progress()) {
    // Progress::thread, a small message: this thread makes the rounds for its polling
    // window instead of waiting for the progress thread to hand the ACK over; for a
    // bounded time, as the callbacks wait meanwhile.
    if (ready()) return true;
    if (d.count() > 0 && node->borrow_progress(*board_, seq_, start + std::min({spin_, d, kMaxBorrow}))) return true;
  } else if (node) {
    // Progress::caller: this thread makes the progress it waits for, in rounds short
    // enough to look at the outcome between them.
    for (;;) {
      if (ready()) return true;
      const auto now = std::chrono::steady_clock::now();
      if (now - start >= d) return false;
      const auto left = d - (now - start);
      (void)node->drive(now + std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(10)),
                        detail::Awaited{board_.get(), seq_});
      if (node->transport_failed.load()) return ready();
    }
  }
  // What is left of the polling window after the rounds this thread made, if any.
  const auto window = std::min(spin_, d);
  const auto polled = std::chrono::nanoseconds(std::chrono::steady_clock::now() - start);
  if (detail::spin_until(ready, window - std::min(polled, window))) return true;
  if (node) node->unpark_if_parked();  // about to sleep: the progress thread must not be parked
  const bool forever = d == std::chrono::nanoseconds::max();
  if (board_) return board_->sleep_until(seq_, forever ? std::nullopt : std::optional(start + d));
  if (forever) {
    done_.wait();
    return true;
  }
  const auto spent = std::chrono::steady_clock::now() - start;
  return done_.wait_for(d - std::min<std::chrono::nanoseconds>(spent, d)) == std::future_status::ready;
}

namespace {

/// Takes g.mu and waits until `has_room()` (under it), then returns the lock.
/// Throws the group's error once it is closed or this member removed, and
/// window_full at once in SendMode::fail.
template <class HasRoom>
std::unique_lock<std::mutex> wait_for_room(detail::GroupState& g, SendMode mode, bool large, HasRoom has_room) {
  std::unique_lock lock(g.mu);
  for (;;) {
    if (g.closed || g.runtime->engine().removed()) throw Error(g.closed_code, g.closed_why);
    if (has_room()) return lock;
    if (mode == SendMode::fail) {
      if (g.runtime->engine().paused())
        throw Error(ErrorCode::window_full,
                    "a member is joining the group: broadcasts resume once it is in (retry, or use SendMode::wait)");
      throw Error(ErrorCode::window_full, large ? "large-message queue full: wait for a Completion or use SendMode::wait"
                                                : "sender window full: wait for a Completion or use SendMode::wait");
    }
    if (g.node->caller_progress()) {
      // Room comes from ACKs, which only this thread's progress reads (no lock held:
      // the round takes g.mu).
      lock.unlock();
      (void)g.node->drive(std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
      lock.lock();
      continue;
    }
    g.node->unpark_if_parked();  // room comes from the progress thread's rounds
    g.room.wait_for(lock, std::chrono::milliseconds(50));
  }
}

/// Completions ahead of a new one (not yet reported to the application) from which
/// its waiter no longer polls.
constexpr std::size_t kSpinAhead = 16;

/// A Completion's polling window: none when it is behind many of this member's
/// messages in flight. It comes after all of them are acked, well past any polling
/// window: its waiter sleeps at once, and leaves the CPU to the members whose ACKs it
/// waits for (a stream's waiter spun on every window and starved them). Completions
/// then come in bursts, and those after the first of a burst are ready when asked.
std::chrono::nanoseconds spin_for(const detail::GroupState& g, std::size_t ahead, bool large) {
  return ahead < kSpinAhead ? g.node->completion_spin(large) : std::chrono::nanoseconds{0};
}

/// Hands what the broadcast produced to the progress thread, which is woken once the
/// lock is released (it runs the self-delivery and the completion).
void hand_over(detail::GroupState& g, AppEvents& app, std::unique_lock<std::mutex>& lock) {
  detail::NodeState::queue_for_app(g, app);
  lock.unlock();
  g.node->wake_progress();
}

/// Whether a waiter for a small Completion of `size` bytes borrows the progress
/// thread's rounds (Config::borrow_progress, NodeState::borrow_progress), under g.mu:
/// on the transports whose progress thread polls (verbs' completion queue is read by
/// that thread alone), and where the waiting thread may keep a CPU while it polls
/// (the rule the transports' polling follows, transport/cpu_share.hpp). On an
/// oversubscribed host the parked progress thread's periodic looks cost the other
/// processes CPU time their ACKs need: over the socket at 4 processes on 2 cores the
/// waiter's message took twice as long. On shm a message of one datagram is the
/// exception: its ACK comes through a mail slot, and a waiter that reads it there
/// saves a thread hand-off per message on every member of an oversubscribed host
/// (docs/benchmarks.md, "Borrowed progress").
bool borrowing(const detail::GroupState& g, std::size_t size) {
  const auto& cfg = g.node->cfg;
  if (cfg.borrow_progress == BorrowProgress::never || g.node->caller_progress()) return false;
  if (cfg.transport != TransportKind::socket && cfg.transport != TransportKind::shm) return false;
  if (cfg.borrow_progress == BorrowProgress::always) return true;
  if (cfg.transport == TransportKind::shm && small::fragment_count(size, small::cut_of(g.node->protocol)) == 1) return true;
  // shm: every member of the view is on this host, one polling thread each meanwhile.
  const auto host_pollers = cfg.transport == TransportKind::shm
                                ? static_cast<std::uint32_t>(g.runtime->engine().view().members.size())
                                : 0U;
  return transport::may_keep_cpu(transport::cpu_share(), 1, host_pollers);
}

std::weak_ptr<detail::NodeState> driver_of(const detail::GroupState& g) {
  return g.node->caller_progress() ? g.node->self : std::weak_ptr<detail::NodeState>{};
}

/// A large message's Completion for `seq`, registered in g.pending_large.
Completion register_large_completion(detail::GroupState& g, Seq seq, AppEvents& app,
                                     std::unique_lock<std::mutex>& lock) {
  std::promise<void> p;
  Completion c(seq, p.get_future().share(), spin_for(g, g.pending_large.size(), true), driver_of(g));
  g.pending_large.emplace(seq, std::move(p));
  hand_over(g, app, lock);
  return c;
}

void check_large_size(const ProtocolConfig& cfg, std::size_t size) {
  if (size > cfg.max_large_message)
    throw Error(ErrorCode::message_too_large, "message of " + std::to_string(size) + " bytes is over the limit of " +
                                                  std::to_string(cfg.max_large_message) +
                                                  " (raise ProtocolConfig::max_large_message on every member)");
}

/// `max_wait` from now, saturated (nanoseconds::max(): for ever).
std::chrono::steady_clock::time_point deadline_after(std::chrono::nanoseconds max_wait) {
  const auto now = std::chrono::steady_clock::now();
  return max_wait >= std::chrono::steady_clock::time_point::max() - now ? std::chrono::steady_clock::time_point::max()
                                                                         : now + max_wait;
}

/// Both take_back()s: true at once if `released` was never lent or is given back
/// already (also by a Node destroyed since: then there is no group to ask), else
/// what `wait(group)` says; forgets the lending once it is back.
template <class Wait>
bool take_back_lending(std::shared_ptr<detail::Lending>& released, detail::GroupState* group, Wait&& wait) {
  if (!released) return true;
  const bool back = released->released.load(std::memory_order_acquire) || (group != nullptr && wait(*group));
  if (back) released.reset();
  return back;
}

/// A large message of `size` bytes handed to the runtime by `start(app)` (under
/// g.mu, once there is room), and its Completion; `seq`, if given, gets its number.
template <class Start>
Completion start_large(detail::GroupState& g, SendMode mode, std::uint64_t size, Start&& start, Seq* seq = nullptr) {
  auto lock = wait_for_room(g, mode, true, [&] { return g.runtime->engine().can_broadcast_large(); });
  AppEvents app;
  const auto res = start(app);
  if (res.error == large::LargeError::over_limit)
    throw Error(ErrorCode::message_too_large,
                "a message of " + std::to_string(size) + " bytes needs more blocks than receivers accept (" +
                    std::to_string(wire::kMaxBlocks) + "): raise ProtocolConfig::min_block_size and block_size");
  HMCAST_ASSERT(res.error == large::LargeError::none);  // can_broadcast_large() said so, under the same lock
  if (seq != nullptr) *seq = res.seq;
  return register_large_completion(g, res.seq, app, lock);
}

/// From this size up, a small-route message's buffer comes from the transport's pool
/// of large buffers rather than from malloc: glibc serves sizes from its mmap
/// threshold (128 KiB until a freed mapping raises it) with a fresh mapping, faulted
/// in page by page as the message is written and unmapped when it is freed. The
/// shim's root paid that on its small path (docs/benchmarks.md, "Buffers that stay
/// mapped").
constexpr std::size_t kPooledSmall = std::size_t{128} << 10;

/// A buffer of `size` bytes (contents unspecified) for a message of the small route.
std::shared_ptr<std::vector<std::byte>> small_buffer(detail::NodeState& node, std::size_t size) {
  if (size >= kPooledSmall) return node.link->allocate_large(size);
  return std::make_shared<std::vector<std::byte>>(size);
}

}  // namespace

Completion Group::broadcast(std::span<const std::byte> bytes, SendMode mode) {
  if (bytes.size() > policy::small_route_for(state_->node->protocol)) return broadcast_large(bytes, mode);
  auto buf = small_buffer(*state_->node, bytes.size());
  std::copy(bytes.begin(), bytes.end(), buf->begin());
  return send_small(std::move(buf), mode);
}

OutgoingMessage Group::prepare(std::size_t size) {
  const auto& cfg = state_->node->protocol;
  if (size <= policy::small_route_for(cfg)) return OutgoingMessage(small_buffer(*state_->node, size));
  check_large_size(cfg, size);
  return OutgoingMessage(state_->node->link->allocate_large(size));
}

Completion Group::broadcast(OutgoingMessage&& message, SendMode mode) {
  if (!message.buf_) throw Error(ErrorCode::invalid_config, "broadcast of an empty OutgoingMessage: get one from prepare()");
  auto buf = std::move(message.buf_);
  if (buf->size() > policy::small_route_for(state_->node->protocol)) return send_large(std::move(buf), mode);
  return send_small(std::move(buf), mode);
}

Completion Group::send_small(std::shared_ptr<const std::vector<std::byte>> msg, SendMode mode) {
  auto lock = wait_for_room(*state_, mode, false, [&] { return state_->runtime->engine().can_broadcast(msg->size()); });
  AppEvents& app = state_->produced;  // hand_over() queues it for the progress thread
  app.clear();
  const auto res = state_->runtime->broadcast(msg, detail::now_ns(), app);
  HMCAST_ASSERT(res.error == small::BroadcastError::none);  // can_broadcast() said so, under the same lock
  // Small messages complete in order: the group's board tells when this one is.
  const auto& board = state_->small_done;
  const std::size_t ahead = res.seq - 1 - std::min<Seq>(board->done(), res.seq - 1);
  // With a polling window its waiter may borrow the progress thread's rounds.
  const auto spin = spin_for(*state_, ahead, false);
  Completion c(res.seq, board, spin,
               spin.count() > 0 && borrowing(*state_, msg->size()) ? state_->node->self : driver_of(*state_));
  hand_over(*state_, app, lock);
  return c;
}

Completion Group::broadcast_large(std::span<const std::byte> bytes, SendMode mode) {
  check_large_size(state_->node->protocol, bytes.size());
  // Copied into a buffer of the transport's pool (no page faults once warm).
  auto buf = state_->node->link->allocate_large(bytes.size());
  std::copy(bytes.begin(), bytes.end(), buf->begin());
  return send_large(std::move(buf), mode);
}

void Group::broadcast_from(std::span<const std::byte> bytes) {
  if (detail::in_callback_of(*state_))
    throw Error(ErrorCode::invalid_config,
                "broadcast_from() in a callback: it waits for this member's own delivery, which runs after the "
                "callback; use broadcast() there");
  LentSend sent = broadcast_lent(bytes);
  (void)take_back(sent, std::chrono::nanoseconds::max());
  sent.completion().get();  // its failure, if any (the bytes are ours again all the same)
}

LentSend Group::broadcast_lent(std::span<const std::byte> bytes, SendMode mode) {
  auto& g = *state_;
  LentSend sent;
  if (bytes.size() <= policy::small_route_for(g.node->protocol)) {
    sent.completion_ = broadcast(bytes, mode);  // datagrams are copies anyway
    return sent;
  }
  check_large_size(g.node->protocol, bytes.size());
  // The lender: the runtime holds it while it may read `bytes` (and this member's
  // own delivery, while it waits to run); the caller holds none, so its release
  // says the bytes are the caller's again. Normally that is at once: the release
  // and the completion come in one round, and the delivery's callback soon after.
  auto lending = std::make_shared<detail::Lending>();
  sent.completion_ = start_large(
      g, mode, bytes.size(),
      [&](AppEvents& app) {
        return g.runtime->broadcast_lent(bytes, detail::lender_for(bytes.data(), lending), detail::now_ns(), app);
      },
      &sent.seq_);
  sent.released_ = std::move(lending);
  return sent;
}

bool Group::take_back(LentSend& sent, std::chrono::nanoseconds max_wait) {
  return take_back_lending(sent.released_, state_.get(), [&](detail::GroupState& g) {
    // Both waits below need the progress thread, which runs the callbacks.
    if (max_wait.count() != 0 && detail::in_callback_of(g))
      throw Error(ErrorCode::invalid_config,
                  "take_back() of a sent message with a wait, in a callback: the wait needs the thread that runs "
                  "the callbacks; take it back outside them, or with no wait");
    const auto deadline = deadline_after(max_wait);
    if (!sent.completion_.wait_for(max_wait)) return false;  // no outcome yet
    bool failed = false;
    try {
      sent.completion_.get();
    } catch (...) {
      failed = true;
    }
    // A message that will not complete: the group keeps what it still needs in a
    // copy of its own (the runtime's, and a delivery not yet handed to the application).
    if (failed) {
      std::lock_guard lock(g.mu);
      g.runtime->own_lent(sent.seq_, g.to_app);
    }
    return detail::wait_released(g, *sent.released_, deadline);
  });
}

LentReceive Group::lend_receive(MemberId sender, Seq seq, std::span<std::byte> into) {
  auto& g = *state_;
  LentReceive r;
  r.sender_ = sender;
  r.seq_ = seq;
  // Verbs peers write blocks only into registered buffers (the transport's pool).
  if (g.node->cfg.transport == TransportKind::verbs || into.size() <= policy::small_route_for(g.node->protocol) ||
      into.size() > g.node->protocol.max_large_message)
    return r;
  auto lending = std::make_shared<detail::Lending>();
  std::lock_guard lock(g.mu);
  if (g.closed || g.runtime->engine().removed()) return r;
  if (g.runtime->lend_receive(sender, seq, into, detail::lender_for(into.data(), lending))) r.released_ = lending;
  return r;
}

bool Group::take_back(LentReceive& lent, std::chrono::nanoseconds max_wait) {
  return take_back_lending(lent.released_, state_.get(), [&](detail::GroupState& g) {
    {
      std::lock_guard lock(g.mu);
      g.runtime->unlend_receive(lent.sender_, lent.seq_);  // if its message never came
    }
    return detail::wait_released(g, *lent.released_, deadline_after(max_wait));
  });
}

namespace detail {

std::shared_ptr<const void> lender_for(const void* memory, std::shared_ptr<Lending> l) {
  return {memory, [l = std::move(l)](const void*) {
            l->released.store(true, std::memory_order_release);
            l->released.notify_all();
          }};
}

bool wait_released(GroupState& g, const Lending& l, std::chrono::steady_clock::time_point deadline) {
  const auto released = [&] { return l.released.load(std::memory_order_acquire); };
  while (!released()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    if (g.node->caller_progress()) {
      (void)g.node->drive(std::min(deadline, now + std::chrono::milliseconds(1)));
    } else if (!spin_until(released, std::chrono::microseconds(50))) {
      if (deadline == std::chrono::steady_clock::time_point::max()) l.released.wait(false, std::memory_order_acquire);
      else std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return true;
}

}  // namespace detail

// `buf` came from allocate_large() after check_large_size() (broadcast_large or prepare).
Completion Group::send_large(std::shared_ptr<std::vector<std::byte>> buf, SendMode mode) {
  const auto size = buf->size();
  return start_large(*state_, mode, size, [&](AppEvents& app) {
    return state_->runtime->broadcast_large(std::move(buf), size, detail::now_ns(), app);
  });
}

}  // namespace hmcast
