#include "group_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <thread>
#include <atomic>
#include <optional>

#include "core/assert.hpp"
#include "core/rng.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/socket/manager_server.hpp"
#include "mono_clock.hpp"
#include "process_info.hpp"
#include "auth/group_key.hpp"
#include "forger.hpp"
#include "sprayer.hpp"
#include "workload.hpp"
#include "zk_managers.hpp"

extern char** environ;

namespace hmcast::tools {

namespace {

/// Transports whose members keep files in /dev/shm (the report counts any left).
bool uses_shm_files(const std::string& transport) { return transport == "shm" || transport == "socket+shm"; }

std::string substitute(std::string s, std::uint32_t i) {
  for (auto pos = s.find("{i}"); pos != std::string::npos; pos = s.find("{i}"))
    s.replace(pos, 3, std::to_string(i));
  return s;
}

struct Child {
  std::uint32_t index = 0;  // 1-based
  pid_t pid = -1;
  int in_fd = -1;   // its stdin (we write nothing; closing it says "stop")
  int out_fd = -1;  // its stdout
  std::string pending;
  bool exited = false;  // stdout closed
  bool killed = false;
  std::int64_t armed_ns = 0;      // --kill-mid-write: when it was told to die at its next large copy
  bool crashed_mid_write = false;  // ... and said it did
  std::optional<std::uint32_t> member;
  bool sender = false;
  bool joiner = false;  // started once the group ran
  std::uint32_t host = 0;  // the {i} of its prefix and interface (its index, or the cut member's it replaces)
  bool cut = false;        // --partition: its host was cut off (judged apart, like a killed member)
  std::uint64_t delivered_at_cut = 0;
  bool done = false;
  nlohmann::json done_report;
  nlohmann::json final_tallies;  // per sender [count, digest] when it stopped (the "final" event)
  nlohmann::json departed_delivered;  // per departed sender, the indices delivered (the "final" event)
  std::uint64_t delivered = 0;
  std::vector<std::pair<std::uint64_t, std::int64_t>> views;      // (view id, t_ns)
  std::vector<std::vector<std::uint32_t>> view_members;

  /// When it first installed, at `since` or later, a view without `gone` (views
  /// arrive in time order).
  [[nodiscard]] std::optional<std::int64_t> removal_seen(std::uint32_t gone, std::int64_t since) const {
    for (std::size_t v = 0; v < views.size(); ++v) {
      const auto& m = view_members[v];
      if (views[v].second >= since && std::find(m.begin(), m.end(), gone) == m.end()) return views[v].second;
    }
    return std::nullopt;
  }
};

/// The CPUs this process may run on, in order.
std::vector<std::uint32_t> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<std::uint32_t> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (std::uint32_t c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

/// `v` sorted ascending.
double percentile(const std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const auto idx = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(idx, v.size() - 1)];
}

}  // namespace

nlohmann::json GroupRunReport::to_json() const {
  nlohmann::json j = {{"procs", procs},
          {"senders", senders},
          {"messages_sent", messages_sent},
          {"completed", completed},
          {"delivered_ok", delivered_ok},
          {"duplicates_delivered", duplicates_delivered},
          {"missing", missing},
          {"corrupt", corrupt},
          {"fifo_violations", fifo_violations},
          {"digests_agree", digests_agree},
          {"members_verified", members_verified},
          {"survivors", survivors},
          {"senders_killed", senders_killed},
          {"leaders_killed", leaders_killed},
          {"manager_killed", manager_killed},
          {"members_stopped_manager_lost", members_stopped_manager_lost},
          {"manager_loss_to_stop_ms", manager_loss_to_stop_ms},
          {"manager_loss_ok", manager_loss_ok},
          {"membership", membership},
          {"coordinators_killed", coordinators_killed},
          {"zk_leader_killed", zk_leader_killed},
          {"coordinator_failover_ms", coordinator_failover_ms},
          {"send_failures", send_failures},
          {"cut_members", cut_members},
          {"cut_stopped", cut_stopped},
          {"cut_stop_reason", cut_stop_reason},
          {"cut_stop_ms", cut_stop_ms},
          {"cut_delivered_after_cut", cut_delivered_after_cut},
          {"cut_last_delivery_before_removal_ms", cut_last_delivery_before_removal_ms},
          {"rejoined", rejoined},
          {"disagreements", disagreements},
          {"dead_sender_delivered", dead_sender_delivered},
          {"joined", joined},
          {"joiner_delivered", joiner_delivered},
          {"joiner_first_index", joiner_first_index},
          {"views_installed", views_installed},
          {"view_change_ms", view_change_ms},
          {"bad_packets_dropped", bad_packets_dropped},
          {"repairs_sent", repairs_sent},
          {"batches_sent", batches_sent},
          {"datagrams_batched", datagrams_batched},
          {"small_fragments_placed", small_fragments_placed},
          {"large_restarted", large_restarted},
          {"large_redeliveries_suppressed", large_redeliveries_suppressed},
          {"large_commits_relayed", large_commits_relayed},
          {"large_delivered_on_relay", large_delivered_on_relay},
          {"large_uncommitted_discarded", large_uncommitted_discarded},
          {"faults_dropped", faults_dropped},
          {"faults_duplicated", faults_duplicated},
          {"faults_reordered", faults_reordered},
          {"faults_delayed", faults_delayed},
          {"faults_link_delayed", faults_link_delayed},
          {"faults_released_early", faults_released_early},
          {"bytes_broadcast", bytes_broadcast},
          {"wall_s", wall_s},
          {"latency_p50_us", latency_p50_us},
          {"latency_p99_us", latency_p99_us},
          {"latency_max_us", latency_max_us},
          {"throughput_mb_s", throughput_mb_s},
          {"last_delivery_p50_us", last_delivery_p50_us},
          {"last_delivery_p99_us", last_delivery_p99_us},
          {"timed_out", timed_out},
          {"forged_accepted", forged_accepted},
          {"auth_failures", auth_failures},
          {"replays_refused", replays_refused},
          {"forge_captured", forge_captured},
          {"forge_replayed", forge_replayed},
          {"forge_data", forge_data},
          {"forge_stable", forge_stable},
          {"forge_link_frames", forge_link_frames},
          {"forge_joins_tried", forge_joins_tried},
          {"forge_joins_admitted", forge_joins_admitted},
          {"spray_datagrams", spray_datagrams},
          {"spray_tcp_attempts", spray_tcp_attempts},
          {"spray_tcp_disconnected", spray_tcp_disconnected},
          {"spray_tcp_unreachable", spray_tcp_unreachable},
          {"spray_link_frames", spray_link_frames},
          {"problems", problems},
          {"manager_views", manager_views},
          {"probes_confirmed", probes_confirmed},
          {"probes_failed", probes_failed},
          {"members_emulating", members_emulating},
          {"emulated_datagrams", emulated_datagrams},
          {"policy", policy},
          {"hosts", hosts},
          {"host_leaders", host_leaders}};
  j["transport"] = transport;
  if (uses_shm_files(transport)) {
    j["shm_files_left"] = shm_files_left;
    j["killed_mid_write"] = killed_mid_write;
    j["mid_write_kills"] = mid_write_kills;
    j["shm_locks_recovered"] = shm_locks_recovered;
    j["shm_partial_frames_dropped"] = shm_partial_frames_dropped;
    j["shm_datagrams_waited"] = shm_datagrams_waited;
    j["shm_multicast_overruns"] = shm_multicast_overruns;
    j["shm_datagrams_copied"] = shm_datagrams_copied;
  }
  if (transport == "verbs") {
    j["ud_multicast_datagrams"] = ud_multicast_datagrams;
    j["rc_bytes"] = rc_bytes;
  }
  j["large_bytes_placed"] = large_bytes_placed;
  j["large_regions_held"] = large_regions_held;
  j["members_cpu_s"] = members_cpu_s;
  j["members_cpu_user_s"] = members_cpu_user_s;
  j["members_cpu_since_join_s"] = members_cpu_since_join_s;
  return j;
}

GroupRunReport run_group(const GroupRunOptions& o) {
  if (o.senders == 0 || o.senders > o.procs) throw std::invalid_argument("--senders must be in [1, --procs]");
  if (o.kill + o.kill_mid_write > o.procs - o.senders)
    throw std::invalid_argument("--kill and --kill-mid-write must leave the senders alive: at most --procs minus --senders");
  if (o.kill_mid_write > 0 && o.transport != "shm")
    throw std::invalid_argument("--kill-mid-write needs --transport shm (it cuts a copy into a peer's shared inbox)");
  if (o.kill_senders + o.kill_senders_mid_write >= o.senders)
    throw std::invalid_argument("--kill-senders and --kill-senders-mid-write must leave a sender alive (member 1): "
                                "together at most --senders minus 1");
  if (o.kill_senders_mid_write > 0 && o.transport != "shm")
    throw std::invalid_argument("--kill-senders-mid-write needs --transport shm (it cuts a write into shared memory)");
  if (o.kill_leaders > 0 && o.kill + o.kill_senders + o.kill_mid_write + o.kill_senders_mid_write > 0)
    throw std::invalid_argument("--kill-leaders strikes leaders whether they send or not: use it without the other kills");
  if (o.kill_leaders > 0 && o.join > 0)
    throw std::invalid_argument("--kill-leaders and --join together are not supported: choose one");
  if ((o.kill_senders > 0 || o.kill_senders_mid_write > 0) && o.join > 0)
    throw std::invalid_argument("--kill-senders and --join together are not supported: choose one");
  // Warm-up leaves out the first completions of a serial sender's latency run; a
  // stream's span starts once its warm-up is acked, at the first send after it.
  HMCAST_ASSERT(o.warmup == 0 || ((o.serial || o.span_only) && o.warmup < o.messages));
  const SizeMix mix = SizeMix::parse(o.sizes);
  GroupRunReport rep;
  rep.procs = o.procs;
  rep.transport = o.transport;
  rep.senders = o.senders;
  rep.messages_sent = std::uint64_t{o.senders} * o.messages;

  std::mutex views_mu;
  nlohmann::json views_log = nlohmann::json::array();
  std::optional<membership::IssuedView> first_view;
  std::optional<socket::ManagerServer> manager;  // reset() is --kill-manager: its connections close
  const bool zookeeper = o.membership == "zookeeper";
  rep.membership = o.membership;
  std::string ensemble;
  std::string zk_root;
  Managers managers;
  if (zookeeper) {
    ensemble = !o.zookeeper.empty() ? o.zookeeper : std::getenv("HMCAST_ZK") != nullptr ? std::getenv("HMCAST_ZK") : "";
    if (ensemble.empty())
      throw std::invalid_argument("--membership zookeeper needs --zookeeper HOST:PORT,... (or $HMCAST_ZK)");
    // A tree of its own per run: runs sharing an ensemble do not meet.
    zk_root = "/hmcast-soak-" + std::to_string(::getpid()) + "-" + std::to_string(o.seed);
    // The manager processes read the group key from the environment they inherit.
    if (!o.key_file.empty()) ::setenv("HMCAST_KEY_FILE", o.key_file.c_str(), 1);
    managers.start(self_exe(), ensemble, zk_root, o.manager_host, std::max(o.managers, 1U), views_mu, views_log);
  } else {
    manager.emplace(
        o.manager_host, 0,
        socket::fresh_coordinator_config(),
        [&](const membership::IssuedView& v) {
          std::lock_guard lock(views_mu);
          views_log.push_back({{"view", v.view.id}, {"members", v.view.members.size()}, {"left", v.left},
                               {"t_ns", mono_ns()}});
          if (!first_view) first_view = v;
        },
        // The members' key: --key-file, else $HMCAST_KEY_FILE (which they inherit), else none.
        socket::Succession{}, auth::key_from_file(o.key_file));
  }
  const std::string manager_addr = zookeeper ? std::string() : o.manager_host + ":" + std::to_string(manager->port());
  std::int64_t coordinator_killed_ns = 0;
  std::int64_t manager_killed_ns = 0;
  const std::string exe = self_exe();
  std::vector<Child> kids;
  kids.reserve(o.procs + o.join + o.partition);  // references into it stay valid while joiners are added
  const std::uint64_t expected = rep.messages_sent;
  const std::vector<std::uint32_t> cpus = usable_cpus();
  const bool bind = o.bind && !cpus.empty() && o.procs + o.join <= cpus.size();
  const auto start_member = [&](bool joiner, std::uint32_t host = 0) {
    Child& c = kids.emplace_back();
    c.index = static_cast<std::uint32_t>(kids.size());
    c.host = host != 0 ? host : (c.index - 1) / o.per_host + 1;
    c.joiner = joiner;
    std::vector<std::string> argv;
    for (const auto& w : o.prefix) argv.push_back(substitute(w, c.host));
    argv.insert(argv.end(), {exe, "member"});
    if (zookeeper) argv.insert(argv.end(), {"--zookeeper", ensemble, "--zk-root", zk_root});
    else argv.insert(argv.end(), {"--manager", manager_addr});
    argv.insert(argv.end(), {"--group", o.group, "--size",
                             std::to_string(o.procs), "--senders", std::to_string(o.senders), "--messages",
                             std::to_string(o.messages), "--sizes", o.sizes, "--seed", std::to_string(o.seed),
                             "--loss", o.block_multicast ? std::string("1") : std::to_string(o.loss), "--dup", std::to_string(o.dup), "--reorder",
                             std::to_string(o.reorder), "--delay-us", std::to_string(o.delay_us), "--link-delay-us",
                             std::to_string(o.link_delay_us), "--interface", substitute(o.interface_template, c.host),
                             "--progress-ms", std::to_string(o.progress_ms),
                             "--timeout", std::to_string(o.timeout_s)});
    if (o.transport != "socket")
      argv.insert(argv.end(), {"--transport", o.transport, "--device", o.device, "--completion", o.completion});
    if (o.mtu != 0) argv.insert(argv.end(), {"--mtu", std::to_string(o.mtu)});
    // Hosts on one machine: without namespaces to separate them, members say which
    // host they stand for, so the two-level group has several.
    if (o.prefix.empty() && o.per_host > 1 && o.transport == "socket+shm")
      argv.insert(argv.end(), {"--host-identity", "host" + std::to_string(c.host)});
    if (!o.key_file.empty()) argv.insert(argv.end(), {"--key-file", o.key_file});
    if (o.probe_deadline_ms != 0) argv.insert(argv.end(), {"--probe-deadline-ms", std::to_string(o.probe_deadline_ms)});
    if (o.serial) argv.emplace_back("--serial");
    if (o.kill_mid_write + o.kill_senders_mid_write > 0)
      argv.emplace_back("--crash-mid-write");  // only the victims are ever armed
    if (o.timestamps) argv.emplace_back("--timestamps");
    if (o.span_only) argv.emplace_back("--span-only");
    if (o.span_only && o.warmup > 0) argv.insert(argv.end(), {"--span-warmup", std::to_string(o.warmup)});
    if (o.verify != "full") argv.insert(argv.end(), {"--verify", o.verify});
    if (joiner) argv.emplace_back("--joiner");
    if (bind) argv.insert(argv.end(), {"--cpu", std::to_string(cpus[(c.index - 1) % cpus.size()])});
    argv.insert(argv.end(), o.member_args.begin(), o.member_args.end());
    c.pid = spawn(argv, c.in_fd, c.out_fd);
  };
  for (std::uint32_t i = 0; i < o.procs; ++i) start_member(false);

  Rng rng(o.seed ^ 0x6b696c6cULL);
  std::atomic<bool> stop_spray{false};
  SprayStats spray_stats;
  std::string spray_failure;  // the sprayer could not run (set by its thread before it ends)
  std::thread sprayer;
  bool spray_started = false;
  std::thread forger;
  ForgeStats forge_stats;
  std::string forge_failure;
  bool forger_started = false;
  std::vector<std::pair<std::uint32_t, std::int64_t>> kills;  // (member id, t_ns)
  bool killed_yet = o.kill == 0 && o.kill_mid_write == 0 && o.kill_senders_mid_write == 0 && o.kill_senders == 0 &&
                    o.kill_leaders == 0 &&
                    !o.kill_manager && o.kill_coordinator == 0 &&
                    o.kill_zk_leader == 0 && o.partition == 0;
  std::int64_t cut_ns = 0;
  bool healed = o.partition == 0;
  std::uint32_t rejoins = 0;
  std::vector<std::uint32_t> dead_senders;  // member ids
  bool joins_started = o.join == 0;
  bool stopping = false;
  std::int64_t first_join = 0;
  std::int64_t last_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s + 30);
  auto next_progress = std::chrono::steady_clock::now();
  std::array<char, 65536> buf{};

  const auto handle_line = [&](Child& c, const std::string& line) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event")) return;
    const std::string ev = j["event"];
    if (ev == "joined") {
      c.member = j["member"].get<std::uint32_t>();
      c.sender = j["sender"].get<bool>();
      if (first_join == 0) first_join = j["t_ns"].get<std::int64_t>();
    } else if (ev == "view") {
      c.views.emplace_back(j["view"].get<std::uint64_t>(), j["t_ns"].get<std::int64_t>());
      c.view_members.push_back(j["members"].get<std::vector<std::uint32_t>>());
    } else if (ev == "progress") {
      c.delivered = j["delivered"].get<std::uint64_t>();
    } else if (ev == "final") {
      c.final_tallies = j["per_sender"];
      c.departed_delivered = j.value("departed_delivered", nlohmann::json::object());
    } else if (ev == "crashed_mid_write" && c.armed_ns != 0 && !c.crashed_mid_write) {
      // It died as it wrote this: the view change is timed from here, not from the arming.
      c.crashed_mid_write = true;
      ++rep.killed_mid_write;
      j["member"] = c.member.value_or(0);
      for (auto& k : kills)
        if (c.member && k.first == *c.member) k.second = j["t_ns"].get<std::int64_t>();
      std::sort(kills.begin(), kills.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
      if (o.progress != nullptr)
        *o.progress << "member " << c.member.value_or(0) << " died halfway through a copy: " << j.dump() << std::endl;
      rep.mid_write_kills.push_back(std::move(j));
    } else if (ev == "done") {
      c.done = true;
      c.delivered = j["delivered"].get<std::uint64_t>();
      c.done_report = std::move(j);
      last_done = std::max(last_done, c.done_report["t_ns"].get<std::int64_t>());
    }
  };

  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Child*> who;
    for (auto& c : kids)
      if (!c.exited) {
        fds.push_back({c.out_fd, POLLIN, 0});
        who.push_back(&c);
      }
    if (fds.empty()) break;
    if (::poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) break;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Child& c = *who[k];
      const ssize_t n = ::read(c.out_fd, buf.data(), buf.size());
      if (n <= 0) {
        c.exited = true;
        ::close(c.out_fd);
        continue;
      }
      c.pending.append(buf.data(), static_cast<std::size_t>(n));
      for (auto nl = c.pending.find('\n'); nl != std::string::npos; nl = c.pending.find('\n')) {
        handle_line(c, c.pending.substr(0, nl));
        c.pending.erase(0, nl + 1);
      }
    }
    const bool all_joined =
        std::all_of(kids.begin(), kids.end(), [](const Child& c) { return c.joiner || c.member.has_value(); });
    std::uint64_t delivered = 0;
    for (const auto& c : kids) delivered += c.killed ? 0 : c.delivered;
    // Kill once the group is well under way: a fifth of all deliveries done.
    if (!killed_yet && all_joined && delivered * 5 >= expected * o.procs) {
      // Up to `count` members still running that `fits` takes, never member 1 (whose
      // figures the reports use), drawn from the seed.
      const auto pick = [&](std::uint32_t count, const auto& fits) {
        std::vector<Child*> candidates;
        for (auto& c : kids)
          if (!c.killed && c.member && c.member != 1u && fits(c)) candidates.push_back(&c);
        std::vector<Child*> picked;
        for (std::uint32_t k = 0; k < count && !candidates.empty(); ++k) {
          const auto at = rng.below(candidates.size());
          picked.push_back(candidates[at]);
          candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(at));
        }
        return picked;
      };
      const auto pick_victims = [&](std::uint32_t count, bool senders) {
        return pick(count, [&](const Child& c) { return c.sender == senders; });
      };
      // Host leaders as the members compute them (membership/host_layout.hpp): the
      // smallest live member id of each host.
      const auto pick_leaders = [&](std::uint32_t count) {
        return pick(count, [&](const Child& c) {
          return std::none_of(kids.begin(), kids.end(), [&](const Child& other) {
            return other.host == c.host && !other.killed && other.member && *other.member < *c.member;
          });
        });
      };
      // SIGKILL, or (mid_write) SIGUSR1, which arms the member's crash point (hmcast
      // member --crash-mid-write): it dies at its next large write, and says when.
      const auto strike = [&](const std::vector<Child*>& victims, bool mid_write, bool leaders) {
        for (Child* victim : victims) {
          ::kill(victim->pid, mid_write ? SIGUSR1 : SIGKILL);
          victim->killed = true;
          const std::int64_t now_ns = mono_ns();
          if (mid_write) victim->armed_ns = now_ns;
          kills.emplace_back(*victim->member, now_ns);
          if (victim->sender) dead_senders.push_back(*victim->member);
          if (leaders) ++rep.leaders_killed;
          if (o.progress != nullptr)
            *o.progress << (mid_write ? "armed " : "killed ")
                        << (leaders ? "host " + std::to_string(victim->host) + "'s leader, " : std::string())
                        << (victim->sender ? "sender " : "member ") << *victim->member << " (pid " << victim->pid
                        << ")" << (mid_write ? " to die halfway through its next large write" : " with SIGKILL")
                        << std::endl;
        }
      };
      strike(pick_leaders(o.kill_leaders), false, true);
      if (rep.leaders_killed < o.kill_leaders)
        rep.problems.push_back("--kill-leaders: only " + std::to_string(rep.leaders_killed) + " of " +
                               std::to_string(o.kill_leaders) + " host leaders could be struck (member 1 never is)");
      strike(pick_victims(o.kill_senders, true), false, false);
      strike(pick_victims(o.kill, false), false, false);
      strike(pick_victims(o.kill_mid_write, false), true, false);
      strike(pick_victims(o.kill_senders_mid_write, true), true, false);
      if (o.partition > 0) {
        // Cut hosts off the network (their processes live on): each must find itself
        // out and stop, while the rest carry on without it.
        for (Child* victim : pick_victims(o.partition, false)) {
          const auto cmd = substitute(o.cut_command, victim->host);
          if (std::system(cmd.c_str()) != 0) rep.problems.push_back("the cut command failed: " + cmd);
          victim->killed = victim->cut = true;
          victim->delivered_at_cut = victim->delivered;
          cut_ns = mono_ns();
          kills.emplace_back(*victim->member, cut_ns);
          if (o.progress != nullptr)
            *o.progress << "cut member " << *victim->member << " off (" << cmd << ")" << std::endl;
        }
      }
      if (o.kill_manager) {
        // What members see when the manager's process dies: every control connection closes.
        manager.reset();
        manager_killed_ns = mono_ns();
        if (o.progress != nullptr) *o.progress << "killed the membership manager" << std::endl;
      }
      if (o.kill_coordinator > 0) {
        if (managers.kill_seated()) {
          coordinator_killed_ns = mono_ns();
          ++rep.coordinators_killed;
          if (o.progress != nullptr) *o.progress << "killed the seated coordinator with SIGKILL" << std::endl;
        } else {
          rep.problems.push_back("--kill-coordinator: no manager said it coordinates");
        }
      }
      if (o.kill_zk_leader > 0) {
        const auto why_not = kill_zk_leader();
        rep.zk_leader_killed = why_not.empty();
        if (!why_not.empty()) rep.problems.push_back("--kill-zk-leader: " + why_not);
        else if (o.progress != nullptr) *o.progress << "killed the ZooKeeper ensemble's leader" << std::endl;
      }
      killed_yet = true;
    }
    // The cut hosts come back once each cut member stopped (at most 30 s after the
    // cut): a new member joins from each, as a joiner.
    if (!healed && cut_ns > 0 &&
        (std::all_of(kids.begin(), kids.end(), [](const Child& c) { return !c.cut || c.done || c.exited; }) ||
         mono_ns() - cut_ns > 30'000'000'000LL)) {
      healed = true;
      std::vector<std::uint32_t> hosts;
      for (const auto& c : kids)
        if (c.cut) hosts.push_back(c.host);
      for (const auto h : hosts) {
        const auto cmd = substitute(o.heal_command, h);
        if (std::system(cmd.c_str()) != 0) rep.problems.push_back("the heal command failed: " + cmd);
        start_member(true, h);
        ++rejoins;
        if (o.progress != nullptr) *o.progress << "healed host " << h << "; a new member joins from it" << std::endl;
      }
    }
    // Joiners come in once the group is well under way too: two fifths done.
    if (!joins_started && all_joined && delivered * 5 >= expected * o.procs * 2) {
      for (std::uint32_t j = 0; j < o.join; ++j) start_member(true);
      joins_started = true;
      if (o.progress != nullptr) *o.progress << "started " << o.join << " joining member(s)" << std::endl;
    }
    if (o.progress != nullptr && std::chrono::steady_clock::now() >= next_progress && all_joined) {
      *o.progress << "progress: " << delivered << " of " << expected * (o.procs - kills.size())
                  << " deliveries" << std::endl;
      next_progress = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
    // The hostile peers aim at the first view, once every member joined.
    const auto hostile_target = [&] {
      std::lock_guard lock(views_mu);
      return first_view;
    };
    if (o.spray_forged && all_joined && !forger_started) {
      const auto target = hostile_target();
      forger_started = target.has_value();
      if (target)
        forger = std::thread([&, t = *target] {
          try {
            forge_stats = spray_forged(t, substitute(o.interface_template, 1), manager_addr, o.procs, o.seed,
                                       stop_spray);
          } catch (const std::exception& e) {
            forge_failure = e.what();
          }
        });
    }
    if (o.spray && all_joined && !spray_started) {
      const auto target = hostile_target();
      spray_started = target.has_value();
      if (target)
        sprayer = std::thread([&, t = *target] {
          try {
            if (o.transport == "verbs")
              spray_stats = spray_verbs(t, substitute(o.interface_template, 1), o.device, o.seed, stop_spray);
            else
              spray_stats = spray(t, substitute(o.interface_template, 1), o.seed, stop_spray);
          } catch (const std::exception& e) {
            spray_failure = e.what();
          }
        });
    }
    // An armed victim that found no large copy to die in within 10 s is killed from
    // here, and the run says the crash point was never reached.
    for (auto& c : kids)
      if (c.armed_ns != 0 && !c.crashed_mid_write && !c.exited && mono_ns() - c.armed_ns > 10'000'000'000LL) {
        ::kill(c.pid, SIGKILL);
        c.armed_ns = 0;
        rep.problems.push_back("member " + std::to_string(c.member.value_or(0)) +
                               " was armed to die mid-copy but wrote no large frame within 10 s (SIGKILLed instead)");
      }
    const bool all_done = std::all_of(kids.begin(), kids.end(), [](const Child& c) { return c.killed || c.done || c.exited; });
    // Survivors may be done before the view without a victim reaches them: keep
    // them a little longer (at most 5 s after the last kill) so it can be judged.
    const auto saw_removal = [&](const Child& c) {
      return std::all_of(kills.begin(), kills.end(),
                         [&](const auto& k) { return c.removal_seen(k.first, k.second).has_value(); });
    };
    const bool views_settled =
        kills.empty() || mono_ns() - kills.back().second > 5'000'000'000LL ||
        std::all_of(kids.begin(), kids.end(), [&](const Child& c) { return c.killed || c.joiner || c.exited || saw_removal(c); });
    // With the coordinator killed: until every survivor installed its successor's
    // first view (at most 15 s), so the failover is measured and not cut short.
    const auto saw_successor = [&](const Child& c) {
      return std::any_of(c.views.begin(), c.views.end(), [&](const auto& v) { return v.second > coordinator_killed_ns; });
    };
    const bool successor_settled =
        coordinator_killed_ns == 0 || mono_ns() - coordinator_killed_ns > 15'000'000'000LL ||
        std::all_of(kids.begin(), kids.end(), [&](const Child& c) { return c.killed || c.joiner || c.exited || saw_successor(c); });
    if (!stopping && killed_yet && joins_started && healed && all_done && views_settled && successor_settled) {
      stopping = true;  // every survivor is done: let them go
      stop_spray = true;
      if (sprayer.joinable()) sprayer.join();
      if (forger.joinable()) forger.join();
      for (auto& c : kids) ::close(c.in_fd);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      rep.timed_out = true;
      for (auto& c : kids)
        if (!c.exited) ::kill(c.pid, SIGKILL);
      if (!stopping)
        for (auto& c : kids) ::close(c.in_fd);
      stopping = true;
    }
  }
  stop_spray = true;
  if (sprayer.joinable()) sprayer.join();
  if (forger.joinable()) forger.join();
  rep.forge_captured = forge_stats.captured;
  rep.forge_replayed = forge_stats.replayed;
  rep.forge_data = forge_stats.forged_data;
  rep.forge_stable = forge_stats.forged_stable;
  rep.forge_link_frames = forge_stats.link_frames;
  rep.forge_joins_tried = forge_stats.joins_tried;
  rep.forge_joins_admitted = forge_stats.joins_admitted;
  if (o.spray_forged && !o.key_file.empty() && rep.forge_joins_admitted > 0)
    rep.problems.push_back("the manager let the stranger join " + std::to_string(rep.forge_joins_admitted) + " times");
  if (o.spray_forged && !forge_failure.empty()) rep.problems.push_back("the forger failed: " + forge_failure);
  if (o.spray_forged && forge_failure.empty() && (rep.forge_replayed == 0 || rep.forge_data == 0))
    rep.problems.push_back("the forger heard nothing to replay or forge: the test did not run");
  rep.spray_datagrams = spray_stats.datagrams;
  rep.spray_tcp_attempts = spray_stats.tcp_attempts;
  rep.spray_link_frames = spray_stats.link_frames;
  rep.spray_tcp_disconnected = spray_stats.tcp_disconnected;
  rep.spray_tcp_unreachable = spray_stats.tcp_unreachable;
  if (o.spray && rep.spray_tcp_disconnected != rep.spray_tcp_attempts)
    rep.problems.push_back("a member kept a TCP connection that sent it bad input");
  if (o.spray && o.transport == "socket" && spray_failure.empty() && rep.spray_tcp_attempts == 0)
    rep.problems.push_back("no member accepted the sprayer's connections: the bad-stream test did not run");
  if (o.spray && !spray_failure.empty()) rep.problems.push_back("the sprayer failed: " + spray_failure);
  if (o.spray && o.transport == "verbs" && spray_failure.empty() && rep.spray_datagrams == 0)
    rep.problems.push_back("the sprayer sent nothing: the bad-input test did not run");
  for (auto& c : kids) {
    int status = 0;
    while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!c.killed && !rep.timed_out && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      rep.problems.push_back("member process " + std::to_string(c.index) + " exited abnormally (status " +
                             std::to_string(status) + ")");
  }
  std::optional<GroupId> group_id;
  {
    std::lock_guard lock(views_mu);  // the manager's thread writes first_view
    if (first_view) group_id = first_view->group_id;
  }
  if (uses_shm_files(o.transport) && group_id) {
    // Every member is gone: the live ones removed their own files, the survivors
    // those of the killed ones. Whatever is left leaked.
    const std::string prefix = shm::file_prefix(*group_id);
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) ++rep.shm_files_left;
    if (rep.shm_files_left > 0)
      rep.problems.push_back(std::to_string(rep.shm_files_left) + " shared-memory file(s) left in /dev/shm (" +
                             prefix + "*)");
  }

  if (const std::uint32_t armed = o.kill_mid_write + o.kill_senders_mid_write; rep.killed_mid_write < armed)
    rep.problems.push_back(std::to_string(armed - rep.killed_mid_write) + " of " + std::to_string(armed) +
                           " members armed to die mid-copy never did");

  // Judge.
  std::uint64_t expected_digest = 0;
  std::map<std::uint32_t, std::uint64_t> sender_digest;  // all of a sender's messages
  for (std::uint32_t s = 1; s <= o.senders; ++s)
    for (std::uint32_t i = 0; i < o.messages; ++i) {
      const auto size = mix.size_of(o.seed, s, i);
      sender_digest[s] ^= message_digest(o.seed, s, i, size);
      rep.bytes_broadcast += size;
    }
  for (const auto& [s, dg] : sender_digest) expected_digest ^= dg;
  rep.senders_killed = static_cast<std::uint32_t>(dead_senders.size());
  // A member's [count, digest] of sender s's deliveries in `tallies` (none: [0, 0]).
  const auto tally_of = [](const nlohmann::json& tallies, std::uint32_t s) {
    const auto key = std::to_string(s);
    if (!tallies.is_object() || !tallies.contains(key)) return std::pair<std::uint64_t, std::uint64_t>{0, 0};
    return std::pair{tallies[key][0].get<std::uint64_t>(), tallies[key][1].get<std::uint64_t>()};
  };
  std::vector<double> lat;
  rep.digests_agree = true;
  std::uint64_t max_view = 0;
  for (auto& c : kids) {
    if (c.killed) continue;
    ++rep.survivors;
    if (!c.done) {
      rep.missing += expected;
      rep.problems.push_back("member " + std::to_string(c.index) + " never reported done");
      rep.digests_agree = false;
      continue;
    }
    const auto& d = c.done_report;
    if (c.index == 1 && d.contains("policy")) rep.policy = d["policy"];
    const auto got = d["delivered"].get<std::uint64_t>();
    std::uint64_t want = expected;
    std::uint64_t want_digest = expected_digest;
    if (c.joiner) {
      // Each sender's messages from the first this joiner saw on; a sender it saw
      // nothing from counts as missing whole (it joined mid-stream, so it must see some).
      want = 0;
      want_digest = 0;
      const auto& firsts = d["first_index"];
      for (std::uint32_t s = 1; s <= o.senders; ++s) {
        const auto key = std::to_string(s);
        const std::uint32_t first = firsts.contains(key) ? firsts[key].get<std::uint32_t>() : 0;
        if (!firsts.contains(key))
          rep.problems.push_back("joiner " + std::to_string(c.index) + " delivered nothing of sender " + key);
        want += o.messages - first;
        for (std::uint32_t i = first; i < o.messages; ++i)
          want_digest ^= message_digest(o.seed, s, i, mix.size_of(o.seed, s, i));
        rep.joiner_first_index = rep.joiner_first_index < 0 ? first : std::min<std::int64_t>(rep.joiner_first_index, first);
      }
      ++rep.joined;
      rep.joiner_delivered += got;
    }
    // A killed sender's messages: this member is judged on the rest; whether the
    // survivors agree on the killed one's is judged below.
    for (std::uint32_t dead : dead_senders) {
      const auto [count, digest] = tally_of(d["per_sender"], dead);
      want = want - o.messages + count;
      want_digest ^= sender_digest[dead] ^ digest;
    }
    rep.missing += want > got ? want - got : 0;
    rep.duplicates_delivered += d["duplicates_delivered"].get<std::uint64_t>();
    rep.corrupt += d["corrupt"].get<std::uint64_t>() + d["unexpected"].get<std::uint64_t>();
    rep.fifo_violations += d["fifo_violations"].get<std::uint64_t>();
    rep.bad_packets_dropped += d["bad_packets_dropped"].get<std::uint64_t>();
    rep.forged_accepted += d.value("forged_accepted", std::uint64_t{0});
    rep.auth_failures += d.value("auth_failures", std::uint64_t{0});
    rep.replays_refused += d.value("replays_refused", std::uint64_t{0});
    rep.repairs_sent += d["repairs_sent"].get<std::uint64_t>();
    rep.batches_sent += d.value("batches_sent", std::uint64_t{0});
    rep.datagrams_batched += d.value("datagrams_batched", std::uint64_t{0});
    rep.small_fragments_placed += d.value("small_fragments_placed", std::uint64_t{0});
    rep.large_restarted += d["large_restarted"].get<std::uint64_t>();
    rep.large_redeliveries_suppressed += d["large_redeliveries_suppressed"].get<std::uint64_t>();
    rep.large_commits_relayed += d.value("large_commits_relayed", std::uint64_t{0});
    rep.large_delivered_on_relay += d.value("large_delivered_on_relay", std::uint64_t{0});
    rep.large_uncommitted_discarded += d.value("large_uncommitted_discarded", std::uint64_t{0});
    rep.ud_multicast_datagrams += d.value("ud_multicast_datagrams", std::uint64_t{0});
    rep.rc_bytes += d.value("rc_bytes", std::uint64_t{0});
    rep.shm_locks_recovered += d.value("shm_locks_recovered", std::uint64_t{0});
    rep.hosts = std::max(rep.hosts, d.value("hosts", std::uint32_t{0}));
    rep.host_leaders += d.value("host_leader", false) ? 1U : 0U;
    rep.shm_partial_frames_dropped += d.value("shm_partial_frames_dropped", std::uint64_t{0});
    rep.shm_datagrams_waited += d.value("shm_datagrams_waited", std::uint64_t{0});
    rep.shm_multicast_overruns += d.value("shm_multicast_overruns", std::uint64_t{0});
    rep.shm_datagrams_copied += d.value("shm_datagrams_copied", std::uint64_t{0});
    rep.large_bytes_placed += d.value("large_bytes_placed", std::uint64_t{0});
    rep.large_regions_held += d.value("large_regions_held", std::uint64_t{0});
    rep.members_cpu_s += d.value("cpu_s", 0.0);
    rep.members_cpu_since_join_s += d.value("cpu_since_join_s", 0.0);
    rep.members_cpu_user_s += d.value("cpu_user_s", 0.0);
    const auto probe = d.value("multicast_probe", std::string{});
    rep.probes_confirmed += probe == "confirmed" ? 1U : 0U;
    rep.probes_failed += probe == "failed" ? 1U : 0U;
    rep.members_emulating += d.value("multicast_emulated", false) ? 1U : 0U;
    rep.emulated_datagrams += d.value("emulated_datagrams_sent", std::uint64_t{0});
    if (const auto f = d.find("faults"); f != d.end()) {
      rep.faults_dropped += f->value("dropped", std::uint64_t{0});
      rep.faults_duplicated += f->value("duplicated", std::uint64_t{0});
      rep.faults_reordered += f->value("reordered", std::uint64_t{0});
      rep.faults_delayed += f->value("delayed", std::uint64_t{0});
      rep.faults_link_delayed += f->value("link_delayed", std::uint64_t{0});
      rep.faults_released_early += f->value("released_early", std::uint64_t{0});
    }
    rep.completed += d["completed"].get<std::uint64_t>();
    if (d.value("timed_out", false)) rep.timed_out = true;  // it stopped at its own --timeout
    rep.send_failures += d["send_failures"].get<std::uint64_t>();
    if (d["send_failures"].get<std::uint64_t>() > 0)
      rep.problems.push_back("member " + std::to_string(*c.member) + ": " + d["send_error"].get<std::string>());
    const bool digest_ok = d["digest"].get<std::uint64_t>() == want_digest;
    rep.digests_agree = rep.digests_agree && digest_ok;
    if (digest_ok && got == want && d["duplicates_delivered"].get<std::uint64_t>() == 0 &&
        d["corrupt"].get<std::uint64_t>() == 0 && d["fifo_violations"].get<std::uint64_t>() == 0)
      ++rep.members_verified;
    // In send order (a serial sender completes each before the next).
    const auto& sender_lat = d["latencies_us"];
    for (std::size_t i = o.warmup; i < sender_lat.size(); ++i) lat.push_back(sender_lat[i].get<double>());
    // Views of the run, not of the members leaving at its end.
    for (const auto& [id, t] : c.views)
      if (t <= last_done) max_view = std::max(max_view, id);
  }
  rep.views_installed = max_view;
  if (coordinator_killed_ns > 0) {
    // Each survivor's first view after the coordinator's death came from its successor.
    for (const auto& c : kids) {
      if (c.killed || c.joiner) continue;
      std::int64_t first_after = 0;
      for (const auto& [id, t] : c.views)
        if (t > coordinator_killed_ns && (first_after == 0 || t < first_after)) first_after = t;
      if (first_after == 0) {
        rep.problems.push_back("member " + std::to_string(c.index) + " installed no view after the coordinator died");
        continue;
      }
      rep.coordinator_failover_ms =
          std::max(rep.coordinator_failover_ms, static_cast<double>(first_after - coordinator_killed_ns) / 1e6);
    }
  }
  managers.stop();
  rep.rejoined = rejoins;
  for (const auto& c : kids) {
    if (!c.cut) continue;
    ++rep.cut_members;
    const auto stopped = c.done ? c.done_report.value("stopped", std::string{}) : std::string{};
    if (stopped.empty()) {
      rep.problems.push_back("cut member " + std::to_string(c.index) + " never stopped");
      continue;
    }
    ++rep.cut_stopped;
    rep.cut_stop_reason = stopped;
    const auto t = c.done_report["t_ns"].get<std::int64_t>();
    rep.cut_stop_ms = std::max(rep.cut_stop_ms, static_cast<double>(t - cut_ns) / 1e6);
    rep.cut_delivered_after_cut += c.done_report["delivered"].get<std::uint64_t>() - c.delivered_at_cut;
    // Its removal: the first view without it at any survivor. Nothing may be
    // delivered there after that (it hears nothing, and must not deliver late).
    std::int64_t removed_at = 0;
    for (const auto& other : kids) {
      if (other.killed || other.joiner) continue;
      if (const auto t_seen = other.removal_seen(*c.member, cut_ns); t_seen && (removed_at == 0 || *t_seen < removed_at))
        removed_at = *t_seen;
    }
    const auto last = c.done_report.value("last_delivery_ns", std::int64_t{0});
    if (removed_at == 0) {
      rep.problems.push_back("cut member " + std::to_string(c.index) + " was never removed");
    } else {
      rep.cut_last_delivery_before_removal_ms =
          std::min(rep.cut_last_delivery_before_removal_ms, static_cast<double>(removed_at - last) / 1e6);
      if (last > removed_at)
        rep.problems.push_back("cut member " + std::to_string(c.index) + " delivered after its removal");
    }
  }
  if (o.kill_manager) {
    // Without a manager no view can change: what the README promises is that every
    // member stops with manager_lost (its broadcasts fail), soon, and none hangs.
    rep.manager_killed = manager_killed_ns > 0;
    for (const auto& c : kids) {
      if (c.killed || !c.done) continue;
      const auto stopped = c.done_report.value("stopped", std::string{});
      if (stopped.find("manager") == std::string::npos) continue;
      ++rep.members_stopped_manager_lost;
      const auto t = c.done_report["t_ns"].get<std::int64_t>();
      if (manager_killed_ns > 0 && t > manager_killed_ns)
        rep.manager_loss_to_stop_ms = std::max(rep.manager_loss_to_stop_ms, static_cast<double>(t - manager_killed_ns) / 1e6);
    }
    rep.manager_loss_ok = rep.manager_killed && !rep.timed_out && rep.members_stopped_manager_lost == rep.survivors &&
                          rep.survivors == o.procs && rep.corrupt == 0 && rep.duplicates_delivered == 0;
  }
  for (std::uint32_t dead : dead_senders) {
    // What the survivors delivered of it by the time they stopped.
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::uint32_t> seen;
    for (const auto& c : kids)
      if (!c.killed && c.done)
        ++seen[tally_of(c.final_tallies.is_null() ? c.done_report["per_sender"] : c.final_tallies, dead)];
    if (seen.empty()) continue;
    const auto common = std::max_element(seen.begin(), seen.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
    std::uint32_t agreeing = common->second;
    std::uint32_t total = 0;
    for (const auto& [t, n] : seen) total += n;
    rep.disagreements += total - agreeing;
    rep.dead_sender_delivered[std::to_string(dead)] = common->first.first;
    if (total != agreeing) {
      std::string sets;
      for (const auto& [t, n] : seen)
        sets += (sets.empty() ? "" : ", ") + std::to_string(n) + " delivered " + std::to_string(t.first);
      // The messages some survivors delivered and others did not, with their sizes.
      std::map<std::uint32_t, std::uint32_t> holders;
      for (const auto& c : kids)
        if (!c.killed && c.done && c.departed_delivered.contains(std::to_string(dead)))
          for (const auto& i : c.departed_delivered[std::to_string(dead)]) ++holders[i.get<std::uint32_t>()];
      std::string split;
      for (const auto& [i, n] : holders)
        if (n != total && split.size() < 400)
          split += (split.empty() ? "" : ", ") + std::to_string(i) + " (" + format_size(mix.size_of(o.seed, dead, i)) +
                   ", " + std::to_string(n) + " of " + std::to_string(total) + ")";
      rep.problems.push_back("the survivors disagree on killed sender " + std::to_string(dead) +
                             "'s messages (" + sets + "); only some have: " + split);
    }
  }
  for (const auto& [victim, t_kill] : kills) {
    for (const auto& c : kids) {
      if (c.killed || c.joiner) continue;  // joiners came in after the kill: they never saw the victim
      const auto seen = c.removal_seen(victim, t_kill);
      if (!seen) {
        rep.problems.push_back("member " + std::to_string(c.index) + " never installed a view without killed member " +
                               std::to_string(victim));
        rep.view_change_ms = -1;
        break;
      }
      if (rep.view_change_ms >= 0)
        rep.view_change_ms = std::max(rep.view_change_ms, static_cast<double>(*seen - t_kill) / 1e6);
    }
  }
  {
    std::lock_guard lock(views_mu);
    rep.manager_views = views_log;
  }
  if (o.timestamps) {
    // Per message of member 1: the latest delivery over the survivors.
    std::vector<std::int64_t> sent, last(o.messages, 0);
    for (const auto& c : kids) {
      if (c.killed || !c.done) continue;
      const auto& d = c.done_report;
      if (c.member == 1u) sent = d["send_ns"].get<std::vector<std::int64_t>>();
      const auto dl = d["deliver_ns"].get<std::vector<std::int64_t>>();
      for (std::size_t i = 0; i < dl.size() && i < last.size(); ++i) last[i] = std::max(last[i], dl[i]);
    }
    std::vector<double> spans;
    for (std::size_t i = o.warmup; i < sent.size() && i < last.size(); ++i)
      if (sent[i] > 0 && last[i] >= sent[i]) spans.push_back(static_cast<double>(last[i] - sent[i]) / 1e3);
    std::sort(spans.begin(), spans.end());
    rep.last_delivery_p50_us = percentile(spans, 0.50);
    rep.last_delivery_p99_us = percentile(spans, 0.99);
    // A stream's span starts at its first send after the warm-up (the only one timed).
    const std::size_t start = o.span_only ? o.warmup : 0;
    if (start < sent.size() && sent[start] > 0) {
      const auto end = *std::max_element(last.begin(), last.end());
      rep.send_span_s = static_cast<double>(end - sent[start]) / 1e9;
      for (const auto& c : kids)
        if (c.member == 1u && c.done && !c.killed && c.done_report.contains("last_complete_ns")) {
          const auto acked = c.done_report["last_complete_ns"].get<std::int64_t>();
          if (acked > sent[start]) rep.acked_span_s = static_cast<double>(acked - sent[start]) / 1e9;
        }
    }
  }
  std::sort(lat.begin(), lat.end());
  rep.latency_p50_us = percentile(lat, 0.50);
  rep.latency_p99_us = percentile(lat, 0.99);
  rep.latency_max_us = lat.empty() ? 0 : lat.back();
  rep.wall_s = first_join > 0 && last_done > first_join ? static_cast<double>(last_done - first_join) / 1e9 : 0;
  rep.throughput_mb_s = rep.wall_s > 0 ? static_cast<double>(rep.bytes_broadcast) / 1e6 / rep.wall_s : 0;
  if (rep.timed_out) rep.problems.push_back("the run timed out");
  if (rep.forged_accepted > 0)
    rep.problems.push_back("members delivered " + std::to_string(rep.forged_accepted) + " forged messages");
  if (o.spray_forged && !o.key_file.empty() && rep.auth_failures == 0)
    rep.problems.push_back("no member refused a forgery: the forger did not reach the group");
  if (rep.joined != o.join + rejoins) rep.problems.push_back("a joining member never reported done");
  rep.delivered_ok = !rep.timed_out && rep.survivors == o.procs + o.join + rejoins - kills.size() &&
                     rep.members_verified == rep.survivors && rep.missing == 0 && rep.duplicates_delivered == 0 &&
                     rep.corrupt == 0 && rep.fifo_violations == 0 && rep.digests_agree &&
                     rep.disagreements == 0 &&
                     rep.completed == std::uint64_t{o.senders - rep.senders_killed} * o.messages &&
                     rep.problems.empty();
  return rep;
}

}  // namespace hmcast::tools
