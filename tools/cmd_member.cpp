// `hmcast member`: one member process of a group on the socket transport, as
// started by `hmcast demo`, `hmcast soak` and the emulated cluster. It joins,
// broadcasts its share of the workload if its id is among the senders, checks
// every byte it delivers, and reports on stdout as JSON lines:
//   {"event":"joined", ...}  {"event":"view", ...}  {"event":"progress", ...}  {"event":"done", ...}
// then stays (serving repairs to the others) until its stdin closes.
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <map>
#include <set>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "commands.hpp"
#include "core/wire.hpp"
#include "hmcast/hmcast.hpp"
#include "mono_clock.hpp"
#include "process_info.hpp"
#include "large/schedule.hpp"
#include "transport/shm/crash_point.hpp"
#include "workload.hpp"

namespace hmcast::tools {
namespace {

struct MemberOptions {
  std::string verify = "full";
  std::string segment;
  std::string manager = "127.0.0.1:17700";
  bool embed_manager = false;
  std::string zookeeper;  // the manager is whoever holds the seat there
  std::string zk_root = "/hmcast";
  std::string key_file;  // the group key (hmcast keygen); empty: $HMCAST_KEY_FILE or none
  std::string group = "demo";
  std::uint32_t size = 8;
  std::uint32_t senders = 4;
  std::uint32_t messages = 100;
  std::string sizes = "64,2KiB";
  std::uint64_t seed = 1;
  double loss = 0;
  double dup = 0;
  double reorder = 0;
  std::uint32_t delay_us = 0;       // datagram delay drawn from [0, this]
  std::uint32_t link_delay_us = 0;  // link frame delay drawn from [0, this]
  std::string interface_address = "127.0.0.1";
  std::string host_identity;  // empty: the real host's (transport/host_identity.hpp)
  std::uint32_t mtu = 0;  // 0: the transport's default
  std::string transport = "socket";   // or "verbs", "shm", "socket+shm" (two-level)
  std::string device;                 // verbs: RDMA device (empty: the first active)
  std::string completion = "hybrid";  // how the progress thread waits: hybrid, poll or interrupt
  std::string progress = "thread";    // Config::progress: thread or caller
  bool no_zero_copy = false;           // verbs: large blocks by SEND and copy, not RDMA WRITE
  std::optional<std::uint32_t> busy_poll_us;  // hybrid: polling lasts this long after the last arrival (default: the transport's)
  std::optional<std::uint32_t> busy_poll_max_us;  // hybrid: how far polling may stretch over steady idle gaps
  std::uint32_t progress_ms = 500;
  std::uint32_t timeout_s = 600;
  bool serial = false;      // a sender waits for each completion before the next broadcast
  bool timestamps = false;  // report send and delivery times of member 1's messages
  // A stream's span only (bench's throughput run): the first send, the last delivery
  // and the last completion are timed, not every message, and completions are not
  // handed one by one to a waiting thread. Open MPI's stream reads no clock per message.
  bool span_only = false;
  // With span_only: the first this many broadcasts warm the group up and are waited
  // for before the span starts (hmcast_mpi_bench's stream: warm-up broadcasts, then a
  // barrier, then the clock).
  std::uint32_t span_warmup = 0;
  bool joiner = false;      // joins the group once it runs: expects each sender's messages from some index on
  bool crash_mid_write = false;  // shm: SIGUSR1 arms transport/shm/crash_point.hpp
  // Policy overrides (0 / empty: the policy's choice from the profile).
  std::string profile;       // Config::profile_file
  std::uint32_t probe_deadline_ms = 0;  // 0: the protocol's multicast probe deadline
  std::uint32_t radix = 0;   // ACK-tree radix
  std::string algo;          // large-path schedule
  std::string block;         // large-path block size (every message)
  std::string max_small;     // size above which messages take the large path
  std::uint32_t window = 0;  // large path: blocks a receiver lets come at once
  std::string credit_lead;   // large path: ask for the next block this many bytes early
  std::string link_buffer;   // SocketOptions::link_buffer_bytes
  bool acks_by_link = false; // SocketOptions::direct_datagrams off
  std::string borrow_progress = "auto";  // Config::borrow_progress
  std::optional<std::uint32_t> cpu;  // run on this CPU only (the launcher spreads members, as mpirun binds ranks)
};

LargeAlgorithm parse_large_algorithm(const std::string& name) {
  const auto a = large::parse_algorithm(name);
  if (!a) throw CLI::ValidationError("--algo", "choose sequential, chain, tree or binomial_pipeline, not '" + name + "'");
  switch (*a) {
    case LargeAlgorithm::sequential: return LargeAlgorithm::sequential;
    case LargeAlgorithm::chain: return LargeAlgorithm::chain;
    case LargeAlgorithm::binomial_tree: return LargeAlgorithm::binomial_tree;
    case LargeAlgorithm::binomial_pipeline: break;
  }
  return LargeAlgorithm::binomial_pipeline;
}

class Reporter {
 public:
  void emit(const nlohmann::json& j) {
    std::lock_guard lock(mu_);
    std::cout << j.dump() << std::endl;  // one line per event, flushed: the parent reads as we go
  }

 private:
  std::mutex mu_;
};

/// What this member delivered, per sender.
struct Ledger {
  std::mutex mu;
  std::map<MemberId, std::vector<std::uint8_t>> attempts_seen;  // per index: 1 once delivered
  std::map<std::pair<MemberId, bool>, std::int64_t> last_index;  // per (sender, large): FIFO check
  std::uint64_t unique = 0, duplicates = 0, corrupt = 0, unexpected = 0,
                fifo_violations = 0, bytes = 0;
  std::uint64_t forged = 0;  // deliveries that are a forger's (tools/workload.hpp kForgedMarker)
  std::uint64_t digest = 0;
  std::vector<std::int64_t> deliver_ns;  // of member 1's messages, by index (with timestamps)
  std::int64_t last_delivery_ns = 0;     // the latest delivery of any message
  /// Per sender: how many of its messages were delivered, and the XOR of their
  /// digests. Survivors of a sender's death compare these: they must agree on
  /// which of its messages they delivered.
  std::map<MemberId, std::pair<std::uint64_t, std::uint64_t>> per_sender;
  /// The entries of the maps above of the sender and path last delivered (a std::map
  /// keeps its entries where they are, and nothing is erased from these): a stream
  /// from one sender looks them up once, not three times per message (the delivery
  /// callback runs inside what a throughput run times).
  struct Book {
    MemberId sender = 0;  // 0: none yet
    bool large = false;
    std::vector<std::uint8_t>* seen = nullptr;
    std::pair<std::uint64_t, std::uint64_t>* tally = nullptr;
    std::int64_t* last = nullptr;
  } book;
  /// The entries of (sender, path): from the cache, or found (and made) in the maps. (mu held.)
  Book& book_of(MemberId sender, bool large) {
    if (book.sender != sender || book.large != large || book.seen == nullptr) {
      book = Book{sender, large, &attempts_seen[sender], &per_sender[sender],
                  &last_index.try_emplace({sender, large}, -1).first->second};
    }
    return book;
  }
  /// Senders that left the view (killed): their remaining messages never come.
  std::set<MemberId> departed;
  /// Why the group stopped under us (on_stopped: removed, or the manager is gone).
  std::string stopped;
  std::condition_variable changed;

  /// Every sender either delivered all `messages` or left. (mu held.)
  [[nodiscard]] bool senders_accounted(std::uint32_t senders, std::uint32_t messages) const {
    for (MemberId s = 1; s <= senders; ++s) {
      const auto it = per_sender.find(s);
      if (departed.count(s) == 0 && (it == per_sender.end() || it->second.first < messages)) return false;
    }
    return true;
  }
  [[nodiscard]] nlohmann::json tallies() const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [s, t] : per_sender) j[std::to_string(s)] = {t.first, t.second};
    return j;
  }
};

/// --crash-mid-write: the soak's SIGUSR1 arms the crash point for the next write of
/// 32 KiB or more: a large message's block into a peer's inbox, a repair of a long
/// datagram, or (a sender) a long datagram into its own log; ACKs are far smaller.
void arm_crash_on_signal(int) { hmcast::shm::arm_crash_mid_write(STDOUT_FILENO, 32 * 1024); }

int run_member(const MemberOptions& o) {
  const SizeMix mix = SizeMix::parse(o.sizes);
  Reporter out;
  if (o.crash_mid_write) {
    if (o.transport != "shm") throw std::runtime_error("--crash-mid-write needs --transport shm");
    struct sigaction sa {};
    sa.sa_handler = arm_crash_on_signal;
    ::sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(SIGUSR1, &sa, nullptr) != 0)
      throw std::runtime_error(std::string("cannot handle SIGUSR1: ") + std::strerror(errno));
  }
  if (o.cpu) {
    // Before any thread starts: the progress thread inherits the mask.
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(*o.cpu, &set);
    if (::sched_setaffinity(0, sizeof set, &set) != 0)
      throw std::runtime_error("cannot run on CPU " + std::to_string(*o.cpu) + ": " + std::strerror(errno) +
                               " (leave out --cpu, or name a CPU this process may use)");
  }
  Config cfg;
  cfg.transport = o.transport == "verbs" ? TransportKind::verbs
                  : o.transport == "shm" ? TransportKind::shm
                                         : TransportKind::socket;
  cfg.socket.share_memory = o.transport == "socket+shm";
  cfg.verbs.device = o.device;
  cfg.verbs.interface_address = o.interface_address;  // rdma_cm binds to it
  if (o.mtu != 0) cfg.verbs.mtu = std::min<std::uint32_t>(o.mtu, 4096);
  cfg.verbs.completion = o.completion == "poll"        ? CompletionMode::poll
                         : o.completion == "interrupt" ? CompletionMode::interrupt
                                                       : CompletionMode::hybrid;
  cfg.socket.completion = cfg.verbs.completion;
  cfg.progress = o.progress == "caller" ? Progress::caller : Progress::thread;
  cfg.verbs.zero_copy = !o.no_zero_copy;
  if (o.busy_poll_us) cfg.verbs.busy_poll = cfg.socket.busy_poll = std::chrono::microseconds(*o.busy_poll_us);
  if (o.busy_poll_max_us) cfg.socket.busy_poll_max = std::chrono::microseconds(*o.busy_poll_max_us);
  cfg.group_size = o.size;
  cfg.socket.manager = o.manager;
  cfg.socket.embed_manager = o.embed_manager;
  cfg.socket.zookeeper = o.zookeeper;
  cfg.socket.zookeeper_root = o.zk_root;
  cfg.socket.interface_address = o.interface_address;
  cfg.host_identity = o.host_identity;
  if (o.mtu != 0) cfg.socket.mtu = cfg.shm.mtu = o.mtu;
  cfg.join_timeout = std::chrono::seconds(60);
  cfg.key_file = o.key_file;  // empty: $HMCAST_KEY_FILE, if set
  cfg.faults.datagram_loss = o.loss;
  cfg.faults.datagram_duplicate = o.dup;
  cfg.faults.datagram_reorder = o.reorder;
  cfg.faults.datagram_delay_ns_max = std::int64_t{o.delay_us} * 1000;
  cfg.faults.link_delay_ns_max = std::int64_t{o.link_delay_us} * 1000;
  cfg.faults.seed = o.seed;  // the fault layer mixes in the member id: members draw apart, runs repeat
  cfg.profile_file = o.profile;
  if (!o.link_buffer.empty()) cfg.socket.link_buffer_bytes = static_cast<std::uint32_t>(parse_size(o.link_buffer));
  cfg.socket.direct_datagrams = !o.acks_by_link;
  cfg.borrow_progress = o.borrow_progress == "always" ? BorrowProgress::always
                        : o.borrow_progress == "never" ? BorrowProgress::never
                                                       : BorrowProgress::automatic;
  if (o.radix != 0 || !o.algo.empty() || !o.block.empty() || !o.max_small.empty() || o.window != 0 ||
      !o.credit_lead.empty() || !o.segment.empty() || o.probe_deadline_ms != 0) {
    ProtocolConfig p = default_protocol(cfg);
    if (o.probe_deadline_ms != 0) {
      p.multicast_probe_deadline_ns = std::int64_t{o.probe_deadline_ms} * 1'000'000;
      p.multicast_probe_resend_ns = std::min(p.multicast_probe_resend_ns, p.multicast_probe_deadline_ns / 5);
    }
    if (o.window != 0) p.large_receive_window = o.window;
    if (!o.credit_lead.empty()) p.large_credit_lead_bytes = parse_size(o.credit_lead);
    if (o.radix != 0) p.radix = o.radix;
    if (!o.block.empty()) {
      p.block_size = parse_size(o.block);
      p.target_blocks = 0;  // exactly this block size for every message
    }
    if (!o.segment.empty()) p.segment_size = parse_size(o.segment);
    if (!o.max_small.empty()) {
      p.max_small_message = static_cast<std::uint32_t>(parse_size(o.max_small));
      p.small_route_max = 0;  // exactly this crossover, whatever the group size
    }
    if (!o.algo.empty()) p.large_algorithm = parse_large_algorithm(o.algo);
    cfg.protocol = p;
  }
  Node node(cfg);
  Group g = node.join(o.group);
  const MemberId self = g.self();
  const bool sender = self <= o.senders;
  out.emit({{"event", "joined"}, {"member", self}, {"pid", ::getpid()}, {"sender", sender},
            {"view", g.view().id}, {"t_ns", mono_ns()}});
  // What joining cost (starting the node, the manager, the first view) is not what
  // the traffic costs: the benchmarks' CPU per GB counts from here to the run's end
  // (t_done below), as Open MPI's counts from after MPI_Init to its last broadcast.
  const auto cpu_at_join = process_cpu_seconds();

  Ledger led;
  if (o.timestamps) led.deliver_ns.assign(o.messages, 0);
  std::vector<std::int64_t> send_ns(o.timestamps ? o.messages : 0, 0);
  g.on_view_change([&](const View& v, std::span<const MemberId> left) {
    {
      std::lock_guard lock(led.mu);
      for (MemberId id : left)
        if (id <= o.senders) led.departed.insert(id);
    }
    if (!left.empty()) led.changed.notify_all();
    out.emit({{"event", "view"}, {"member", self}, {"view", v.id}, {"members", v.members},
              {"left", std::vector<MemberId>(left.begin(), left.end())}, {"t_ns", mono_ns()}});
  });
  std::uint64_t expected = std::uint64_t{o.senders} * o.messages;
  g.on_stopped([&](const Error& e) {
    {
      std::lock_guard lock(led.mu);
      led.stopped = e.what();
    }
    led.changed.notify_all();
  });
  const Verify verify = o.verify == "sampled" ? Verify::sampled : o.verify == "stamp" ? Verify::stamp : Verify::full;
  g.on_deliver([&](const Delivery& d) {
    // Before the check, which reads every byte; with span_only, the last message's alone.
    std::int64_t t_delivered = o.span_only ? 0 : mono_ns();
    // Our own messages: their bytes never crossed a transport (the sender delivers
    // from its own buffer), and checking them here, on the progress thread, would
    // delay the ACKs that complete them; so only their header (index) is read, as
    // the Open MPI baseline never checks the root's buffer. Everything received is
    // checked as --verify says: with `stamp`, only its header (its size is checked
    // below), and each sender's last message sampled.
    const bool header_only = d.sender == self || verify == Verify::stamp;
    const auto checked = header_only ? d.bytes.first(std::min(d.bytes.size(), kMessageHeader)) : d.bytes;
    auto c = check_message(o.seed, d.sender, checked, verify == Verify::full ? Verify::full : Verify::sampled);
    if (o.span_only && c && c->index + 1 == o.messages) t_delivered = mono_ns();
    if (c && verify == Verify::stamp && d.sender != self && c->index + 1 == o.messages)
      c = check_message(o.seed, d.sender, d.bytes, Verify::sampled);
    std::lock_guard lock(led.mu);
    if (t_delivered != 0) led.last_delivery_ns = t_delivered;
    if (is_forged(d.bytes)) {
      ++led.forged;
      return;
    }
    if (!c || d.sender > o.senders || c->index >= o.messages || c->attempt != 0) {
      ++led.unexpected;
      return;
    }
    if (!c->intact || d.bytes.size() != mix.size_of(o.seed, d.sender, c->index)) {
      ++led.corrupt;
      return;
    }
    auto& book = led.book_of(d.sender, d.large);
    auto& seen = *book.seen;
    if (seen.empty()) seen.resize(o.messages);
    auto& bits = seen[c->index];
    if (bits != 0) {
      ++led.duplicates;  // any second delivery of an index: the protocol delivers each message once
    } else {
      bits = 1;
      if (!led.deliver_ns.empty() && d.sender == 1 && t_delivered != 0) led.deliver_ns[c->index] = t_delivered;
      ++led.unique;
      led.bytes += d.bytes.size();
      const auto digest = message_digest(o.seed, d.sender, c->index, d.bytes.size());
      led.digest ^= digest;
      auto& tally = *book.tally;
      ++tally.first;
      tally.second ^= digest;
      // Per path, a sender's messages arrive in index order.
      auto& last = *book.last;
      if (static_cast<std::int64_t>(c->index) < last) ++led.fifo_violations;
      last = c->index;
    }
    // Wake the main thread only when it has something to see: waking it on every
    // delivery would put a thread switch next to each one, and on shared cores that
    // is time the protocol is charged for.
    if (o.joiner || led.unique >= expected) led.changed.notify_all();
  });
  // The callbacks above read `led`, `expected` and `send_ns`: leave the group before
  // those go (leave() returns once no callback runs and none will), whichever way
  // this function ends. Members that exit while others still send were reading a
  // destroyed ledger before.
  struct LeaveOnExit {
    Group& g;
    ~LeaveOnExit() { g.leave(); }
  } leave_on_exit{g};

  // The sender: broadcast in order; a waiter thread records all-acked latencies. A view
  // change never fails a survivor's message (large ones restart by themselves), so any
  // error here is a failure.
  std::vector<double> latencies_us;
  std::atomic<std::uint64_t> completed{0}, send_failures{0};
  std::string send_error;
  std::mutex q_mu;
  std::condition_variable q_cv;
  struct InFlight {
    Completion c;
    std::int64_t t0;
  };
  // Called by one thread at a time: the sender in serial runs, the waiter otherwise.
  std::int64_t last_complete_ns = 0;  // when the last completion was seen (the stream's end)
  const auto record_completion = [&](double latency_us) {
    latencies_us.push_back(latency_us);
    last_complete_ns = mono_ns();
    if (++completed == o.messages) {
      std::lock_guard lock(led.mu);  // the main thread may be about to wait: no lost wake-up
      led.changed.notify_all();
    }
  };
  std::deque<InFlight> queue;
  // Set under q_mu; atomic, as the main thread reads it without (Progress::caller: the
  // sending threads make progress while they wait, the main thread once they are done,
  // or at once on a member that only receives).
  std::atomic<bool> sending_done{!sender};
  std::thread send_thread, wait_thread;
  const auto t_start = mono_ns();
  if (sender) {
    send_thread = std::thread([&] {
      std::vector<Completion> stream;  // span_only: every broadcast's, looked at once the last settles
      if (o.span_only) stream.reserve(o.messages);
      for (std::uint32_t i = 0; i < o.messages; ++i) {
        try {
          const auto size = mix.size_of(o.seed, self, i);
          // Written in place (large ones into the transport's pool, warm after the first):
          // broadcast() then sends it without a copy.
          OutgoingMessage msg = g.prepare(size);
          fill_message(msg.bytes(), o.seed, self, i, 0);
          if (o.span_only && i == o.span_warmup && i != 0 && !stream.back().wait_for(std::chrono::seconds(o.timeout_s)))
            throw Error(ErrorCode::closed, "no completion of the warm-up within --timeout");
          const auto t0 = o.span_only && i != o.span_warmup ? 0 : mono_ns();
          if (!send_ns.empty()) send_ns[i] = t0;
          auto c = g.broadcast(std::move(msg));
          if (o.span_only) {
            stream.push_back(std::move(c));
            continue;
          }
          if (o.serial) {
            // Serial runs time the completion where the application sees it: the thread
            // that called broadcast() and waits. Handing it to the waiter thread would
            // add that thread's wake-up to every figure.
            if (!c.wait_for(std::chrono::seconds(o.timeout_s)))
              throw Error(ErrorCode::closed, "no completion within --timeout");
            const auto t_done = mono_ns();
            c.get();  // throws if the broadcast failed
            record_completion(static_cast<double>(t_done - t0) / 1e3);
            continue;
          }
          std::lock_guard lock(q_mu);
          queue.push_back({c, t0});
          q_cv.notify_all();
        } catch (const Error& e) {
          ++send_failures;
          std::lock_guard lock(q_mu);
          send_error = e.what();
          break;
        }
      }
      // The stream ends when its last message is all-acked (a small message's completion
      // settles with every one before it; a large one's may not, and then the end is
      // when it does); then each one's outcome is looked at.
      if (!stream.empty()) {
        const bool last_settled = stream.back().wait_for(std::chrono::seconds(o.timeout_s));
        last_complete_ns = mono_ns();
        std::uint64_t ok = 0;
        for (auto& c : stream) {
          try {
            if (!c.wait_for(std::chrono::seconds(0))) {  // a large one may settle after a later one
              if (!last_settled || !c.wait_for(std::chrono::seconds(o.timeout_s)))
                throw Error(ErrorCode::closed, "no completion within --timeout");
              last_complete_ns = std::max(last_complete_ns, mono_ns());
            }
            c.get();
            ++ok;
          } catch (const Error& e) {
            ++send_failures;
            std::lock_guard lock(q_mu);
            send_error = e.what();
          }
        }
        completed += ok;
        std::lock_guard lock(led.mu);  // the main thread may be about to wait: no lost wake-up
        led.changed.notify_all();
      }
      std::lock_guard lock(q_mu);
      sending_done = true;
      q_cv.notify_all();
    });
    wait_thread = std::thread([&] {
      for (;;) {
        InFlight f;
        {
          std::unique_lock lock(q_mu);
          q_cv.wait(lock, [&] { return !queue.empty() || sending_done; });
          if (queue.empty()) return;
          f = queue.front();
          queue.pop_front();
        }
        try {
          f.c.get();
          record_completion(static_cast<double>(mono_ns() - f.t0) / 1e3);
        } catch (const Error& e) {
          ++send_failures;
          std::lock_guard lock(q_mu);
          send_error = e.what();
        }
      }
    });
  }

  // Watch stdin: the parent closes it when every member is done (or to stop us).
  std::atomic<bool> stdin_closed{false};
  std::thread stdin_thread([&] {
    char buf[256];
    while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
    }
    stdin_closed = true;
    led.changed.notify_all();
  });

  // A joiner gets each sender's messages from the first one sent in its view on: a
  // contiguous run of indices that ends at the sender's last. (With led.mu held.)
  const auto first_seen = [&](MemberId s) -> std::optional<std::uint32_t> {
    auto it = led.attempts_seen.find(s);
    if (it == led.attempts_seen.end()) return std::nullopt;
    const auto& seen = it->second;
    for (std::uint32_t i = 0; i < seen.size(); ++i)
      if (seen[i] != 0) return i;
    return std::nullopt;
  };
  const auto joiner_has_all = [&] {
    for (MemberId s = 1; s <= o.senders; ++s) {
      auto it = led.attempts_seen.find(s);
      if (it == led.attempts_seen.end() || it->second.back() == 0) return false;  // cheap test first
      for (std::uint32_t i = *first_seen(s); i < o.messages; ++i)
        if (it->second[i] == 0) return false;
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  auto next_progress = std::chrono::steady_clock::now();
  bool finished = false;  // every message sent and settled, every one expected here delivered
  bool out_of_time = false;  // --timeout passed first
  {
    std::unique_lock lock(led.mu);
    for (;;) {
      // A sender that left (killed) sends no more: what its survivors got of it is
      // judged by the parent, which compares them.
      const bool got_all = o.joiner ? joiner_has_all()
                                    : led.unique >= expected ||
                                          (!led.departed.empty() && led.senders_accounted(o.senders, o.messages));
      const bool sent_all = !sender || completed + send_failures >= o.messages;
      finished = got_all && sent_all;
      // A stopped group delivers nothing more: report what we have (the parent judges).
      out_of_time = std::chrono::steady_clock::now() >= deadline;
      if (finished || !led.stopped.empty() || stdin_closed || out_of_time) break;
      if (std::chrono::steady_clock::now() >= next_progress) {
        const auto unique = led.unique;
        lock.unlock();
        out.emit({{"event", "progress"}, {"member", self}, {"delivered", unique}, {"completed", completed.load()}});
        lock.lock();
        next_progress = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.progress_ms);
      }
      const auto slice = std::chrono::milliseconds(std::min<std::uint32_t>(o.progress_ms, 200));
      if (cfg.progress == Progress::caller && sending_done) {
        lock.unlock();  // the callbacks this runs take it
        g.poll(std::min<std::chrono::nanoseconds>(slice, std::chrono::milliseconds(10)));
        lock.lock();
        continue;
      }
      led.changed.wait_for(lock, cfg.progress == Progress::caller ? std::min<std::chrono::milliseconds>(slice, std::chrono::milliseconds(1)) : slice);
    }
  }
  const auto t_done = mono_ns();
  const auto cpu_at_done = process_cpu_seconds();  // before the waits below, which carry no traffic
  // Past --timeout, or told to stop, with messages still in flight: the sending threads
  // may wait in broadcast() for room or on a completion that never settles. Leaving
  // fails both at once, so the report comes now and not when the parent kills us.
  if (!finished && sender) g.leave();
  if (send_thread.joinable()) send_thread.join();
  if (wait_thread.joinable()) wait_thread.join();
  if (out_of_time && send_failures > 0)
    send_error = "--timeout (" + std::to_string(o.timeout_s) + " s) passed with " +
                 std::to_string(o.messages - completed.load()) + " of this member's messages unsettled";
  // Verbs: final buffers stay registered until the message is stable here and every
  // peer that could write into them confirmed it stopped. A receiver can also have all
  // its messages before the view that drops a killed peer is installed, with its
  // multicast probe still waiting for that peer's confirmation: the view settles the
  // round (the dead are not waited for), the probe's deadline fails it. Give both a
  // moment, so the report shows whether buffers are all freed (a leak shows as
  // large_regions_held > 0) and how the probe ended, not a race with failure detection.
  auto st = g.stats();
  const auto unsettled = [&] { return st.large_regions_held > 0 || st.multicast_probe == "probing"; };
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (unsettled() && !stdin_closed && std::chrono::steady_clock::now() < drain_until) {
    if (cfg.progress == Progress::caller)
      g.poll(std::chrono::milliseconds(10));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    st = g.stats();
  }
  const auto cpu = process_cpu_seconds();
  nlohmann::json done;
  {
    std::lock_guard lock(led.mu);
    nlohmann::json firsts = nlohmann::json::object();
    if (o.joiner) {
      expected = 0;
      for (MemberId s = 1; s <= o.senders; ++s)
        if (const auto first = first_seen(s)) {
          firsts[std::to_string(s)] = *first;
          expected += o.messages - *first;
        }
    }
    done = {{"event", "done"},
            {"joiner", o.joiner},
            {"first_index", firsts},
            {"member", self},
            {"sender", sender},
            {"expected", expected},
            {"delivered", led.unique},
            {"bytes", led.bytes},
            {"duplicates_delivered", led.duplicates},
            {"corrupt", led.corrupt},
            {"unexpected", led.unexpected},
            {"forged_accepted", led.forged},
            {"fifo_violations", led.fifo_violations},
            {"digest", led.digest},
            {"per_sender", led.tallies()},
            {"stopped", led.stopped},
            {"last_delivery_ns", led.last_delivery_ns},
            {"completed", completed.load()},
            {"send_failures", send_failures.load()},
            {"send_error", send_error},
            {"timed_out", out_of_time},
            {"latencies_us", latencies_us},
            {"send_ns", send_ns},
            {"last_complete_ns", last_complete_ns},
            {"deliver_ns", led.deliver_ns},
            {"elapsed_s", static_cast<double>(t_done - t_start) / 1e9},
            {"cpu_user_s", cpu.user},
            {"cpu_s", cpu.user + cpu.system},
            {"cpu_since_join_s", (cpu_at_done.user + cpu_at_done.system) - (cpu_at_join.user + cpu_at_join.system)},
            {"bad_packets_dropped", st.bad_packets_dropped},
            {"auth_failures", st.auth_failures},
            {"replays_refused", st.replays_refused},
            {"repairs_sent", st.repairs_sent},
            {"large_restarted", st.large_restarted},
            {"large_redeliveries_suppressed", st.large_redeliveries_suppressed},
            {"large_commits_relayed", st.large_commits_relayed},
            {"large_delivered_on_relay", st.large_delivered_on_relay},
            {"large_uncommitted_discarded", st.large_uncommitted_discarded},
            {"ud_multicast_datagrams", st.multicast_datagrams_sent},
            {"rc_bytes", st.link_bytes_sent},
            {"shm_locks_recovered", st.shm_locks_recovered},
            {"shm_partial_frames_dropped", st.shm_partial_frames_dropped},
            {"shm_datagrams_waited", st.shm_datagrams_waited},
            {"shm_multicast_overruns", st.shm_multicast_overruns},
            {"shm_datagrams_copied", st.shm_datagrams_copied},
            {"hosts", st.hosts},
            {"host_members", st.host_members},
            {"host_leader", st.host_leader},
            {"large_bytes_placed", st.large_bytes_placed},
            {"large_regions_held", st.large_regions_held},
            {"views_installed", st.views_installed},
            {"multicast_probe", st.multicast_probe},
            {"multicast_probes_sent", st.multicast_probes_sent},
            {"multicast_probe_round_ms", static_cast<double>(st.multicast_probe_round_ns) / 1e6},
            {"multicast_probe_silent", st.multicast_probe_silent},
            {"multicast_emulated", st.multicast_emulated},
            {"emulated_datagrams_sent", st.emulated_datagrams_sent},
            {"batches_sent", st.batches_sent},
            {"datagrams_batched", st.datagrams_batched},
            {"small_fragments_placed", st.small_fragments_placed},
            {"policy",
             {{"ack_radix", st.ack_radix},
              {"max_small_message", st.max_small_message},
              {"large_algorithm", st.large_algorithm},
              {"last_block_size", st.last_block_size}}},
            {"faults",
             {{"dropped", st.faults.dropped},
              {"duplicated", st.faults.duplicated},
              {"reordered", st.faults.reordered},
              {"delayed", st.faults.delayed},
              {"link_delayed", st.faults.link_delayed},
              {"released_early", st.faults.released_early}}},
            {"t_ns", t_done}};
  }
  out.emit(done);
  // Stay a member until the parent says all are done (making progress, in the caller:
  // the others may still need this member's ACKs and repairs).
  while (cfg.progress == Progress::caller && !stdin_closed) g.poll(std::chrono::milliseconds(10));
  stdin_thread.join();
  {
    // A departed sender's messages that some survivor holds reach the others through
    // repair after the view change: let that settle (no delivery for 1 s, at most 10 s).
    std::unique_lock lock(led.mu);
    const auto settle_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (auto seen = led.unique; !led.departed.empty() && std::chrono::steady_clock::now() < settle_by;) {
      if (cfg.progress == Progress::caller) {
        lock.unlock();  // the callbacks this runs take it
        for (const auto second = std::chrono::steady_clock::now() + std::chrono::seconds(1);
             std::chrono::steady_clock::now() < second;)
          g.poll(std::chrono::milliseconds(10));
        lock.lock();
      } else {
        led.changed.wait_for(lock, std::chrono::seconds(1));
      }
      if (led.unique == seen) break;
      seen = led.unique;
    }
  }
  {
    // What was delivered by the end: a dead sender's last messages may still have
    // been on their way (the survivors finish its stream) when "done" went out.
    std::lock_guard lock(led.mu);
    // Which of a departed sender's messages: the parent names those only some survivors have.
    nlohmann::json indices = nlohmann::json::object();
    for (MemberId s : led.departed) {
      auto& list = indices[std::to_string(s)] = nlohmann::json::array();
      if (const auto it = led.attempts_seen.find(s); it != led.attempts_seen.end())
        for (std::uint32_t i = 0; i < it->second.size(); ++i)
          if (it->second[i] != 0) list.push_back(i);
    }
    out.emit({{"event", "final"}, {"member", self}, {"delivered", led.unique}, {"per_sender", led.tallies()},
              {"departed_delivered", indices}, {"duplicates_delivered", led.duplicates}});
  }
  return 0;
}

}  // namespace

void add_member_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("member", "One member process on the socket or verbs transport (started by demo and soak)");
  auto o = std::make_shared<MemberOptions>();
  cmd->add_option("--manager", o->manager, "HOST:PORT of the membership manager")->capture_default_str();
  cmd->add_flag("--embed-manager", o->embed_manager, "Run the manager in this process, listening on --manager");
  cmd->add_option("--zookeeper", o->zookeeper,
                  "ZooKeeper ensemble HOST:PORT,...: the manager is whichever `hmcast manager --zookeeper` holds the "
                  "coordinator's seat there (--manager is then not used)");
  cmd->add_option("--zk-root", o->zk_root, "Where in ZooKeeper the seat is")->capture_default_str();
  cmd->add_option("--group", o->group, "Group name")->capture_default_str();
  cmd->add_option("--size", o->size, "Group size")->check(CLI::Range(1U, 65536U))->capture_default_str();
  cmd->add_option("--senders", o->senders, "Members with ids 1..S broadcast")->capture_default_str();
  cmd->add_option("--messages", o->messages, "Messages per sender")->capture_default_str();
  cmd->add_option("--sizes", o->sizes, "Message sizes with weights, e.g. 64,2KiB:30,1MiB:1")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Workload seed (the same at every member)")->capture_default_str();
  cmd->add_option("--loss", o->loss, "Datagram loss injected on receive")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--dup", o->dup, "Chance a received datagram is duplicated")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--reorder", o->reorder, "Chance a received datagram is held back until later ones overtake it")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--delay-us", o->delay_us, "Received datagrams delayed by [0, N] microseconds")
      ->check(CLI::Range(0U, 10'000'000U));
  cmd->add_option("--link-delay-us", o->link_delay_us, "Received link frames delayed by [0, N] us (links stay FIFO)")
      ->check(CLI::Range(0U, 10'000'000U));
  cmd->add_option("--interface", o->interface_address, "Local IPv4 address")->capture_default_str();
  cmd->add_option("--host-identity", o->host_identity,
                  "The host this member says it runs on (members naming the same share memory with socket+shm; "
                  "default: the real host's)");
  cmd->add_option("--mtu", o->mtu, "Largest datagram (default: the transport's; verbs: at most 4096, the UD MTU)")
      ->check(CLI::Range(256U, static_cast<unsigned>(wire::kMaxDatagram)));
  cmd->add_option("--transport", o->transport, "socket, verbs, shm (members on one host) or socket+shm (shared memory inside a host, the socket between hosts)")
      ->check(CLI::IsMember({"socket", "verbs", "shm", "socket+shm"}))
      ->capture_default_str();
  cmd->add_option("--device", o->device, "verbs: RDMA device (default: the first with an active port)");
  cmd->add_option("--progress", o->progress,
                  "Who makes the group progress: the Node's thread, or the caller's (the main thread polls, a "
                  "sender's threads while they wait)")
      ->check(CLI::IsMember({"thread", "caller"}));
  cmd->add_option("--completion", o->completion, "How the progress thread waits: hybrid, poll or interrupt")
      ->check(CLI::IsMember({"hybrid", "poll", "interrupt"}))
      ->capture_default_str();
  cmd->add_option("--busy-poll-us", o->busy_poll_us,
                  "hybrid: keep polling this long after the last arrival (default: socket 200, verbs 50)")
      ->check(CLI::Range(0U, 1'000'000U));
  cmd->add_option("--key-file", o->key_file,
                  "The group key (`hmcast keygen`; mode 600): frames are tagged and checked with it. Default: "
                  "$HMCAST_KEY_FILE, or no key");
  cmd->add_option("--busy-poll-max-us", o->busy_poll_max_us,
                  "hybrid, socket and shm: polling may stretch up to this over steady idle gaps (default 5000; "
                  "--busy-poll-us or less: never)")
      ->check(CLI::Range(0U, 1'000'000U));
  cmd->add_option("--cpu", o->cpu, "Run on this CPU only (hmcast bench, soak and demo spread members when there "
                                   "are as many CPUs as members, as mpirun binds ranks)");
  cmd->add_option("--borrow-progress", o->borrow_progress,
                  "Whether a thread waiting on a small message's Completion makes the progress itself "
                  "(Config::borrow_progress): auto (where it may keep a CPU), always, never (callbacks only on the "
                  "progress thread)")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd->add_flag("--no-zero-copy", o->no_zero_copy,
                "verbs: large blocks are SENT and copied instead of RDMA WRITTEN into the final buffer");
  cmd->add_option("--progress-ms", o->progress_ms, "Progress report interval")->check(CLI::Range(10U, 60000U));
  cmd->add_option("--timeout", o->timeout_s, "Give up after this many seconds")->check(CLI::Range(1U, 86400U));
  cmd->add_flag("--crash-mid-write", o->crash_mid_write,
                "shm, for hmcast soak --kill-mid-write and --kill-senders-mid-write: on SIGUSR1, die (SIGKILL) "
                "halfway through the next large write (a frame into a peer's inbox, a datagram into our own log), "
                "and say so on stdout");
  cmd->add_flag("--serial", o->serial, "Wait for each completion before the next broadcast (latency runs)");
  cmd->add_option("--verify", o->verify, "full: check every delivered byte; sampled: about 4096 words spread out, as "
                                         "the MPI baseline's latency runs do; stamp: each message's header and size, "
                                         "and each sender's last message sampled, as the MPI baseline's streams do "
                                         "(benchmarks)")
      ->check(CLI::IsMember({"full", "sampled", "stamp"}))
      ->capture_default_str();
  cmd->add_flag("--timestamps", o->timestamps, "Report send and delivery times of member 1's messages");
  cmd->add_flag("--span-only", o->span_only,
                "Time a stream's first send, last delivery and last completion only (not each message)");
  cmd->add_option("--span-warmup", o->span_warmup,
                  "With --span-only: the first N broadcasts are waited for before the span starts at broadcast N")
      ->check(CLI::Range(0U, 1'000'000U));
  cmd->add_option("--probe-deadline-ms", o->probe_deadline_ms,
                  "Multicast probe: every member must confirm within this (default: the protocol's)")
      ->check(CLI::Range(1U, 600'000U));
  cmd->add_option("--profile", o->profile, "Transport profile file (hmcast bench --calibrate); default: built in");
  cmd->add_option("--radix", o->radix, "Override the policy's ACK-tree radix")->check(CLI::Range(2U, 65536U));
  cmd->add_option("--algo", o->algo, "Override the large-path schedule: sequential, chain, tree, binomial_pipeline");
  cmd->add_option("--window", o->window, "Override the large path's receive window (blocks)")
      ->check(CLI::Range(1U, 64U));
  cmd->add_option("--credit-lead", o->credit_lead, "Override the large path's credit lead, e.g. 1MiB");
  cmd->add_option("--link-buffer", o->link_buffer, "Socket buffers of each reliable link, e.g. 4MiB (default: kernel)");
  cmd->add_flag("--acks-by-link", o->acks_by_link,
                "Send ACKs over the reliable links, never as datagrams (SocketOptions::direct_datagrams off)");
  cmd->add_option("--segment", o->segment, "Override the large path's segment size (bytes moved as one transfer), e.g. 256KiB");
  cmd->add_option("--max-small", o->max_small, "Override the size above which messages take the large path");
  cmd->add_option("--block", o->block, "Override the large-path block size (every message), e.g. 1MiB");
  cmd->add_flag("--joiner", o->joiner,
                "Join the running group (mid-stream): expect each sender's messages from the first sent in our view");
  cmd->callback([o] {
    const int rc = run_member(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace hmcast::tools
