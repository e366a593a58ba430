// Runs a group of `hmcast member` processes on the socket transport and judges
// the outcome: starts a membership manager in this process, spawns the members
// (optionally through a prefix such as `ip netns exec hm{i}`), follows their JSON
// reports, kills members on request, and aggregates what every survivor saw.
// Used by `hmcast demo`, `hmcast soak` and `hmcast bench`.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hmcast::tools {

struct GroupRunOptions {
  std::uint32_t procs = 8;
  std::uint32_t senders = 4;
  std::uint32_t messages = 100;
  std::string sizes = "64,2KiB";
  std::uint64_t seed = 1;
  double loss = 0;
  // The fault layer at each member (FaultConfig): duplication, reordering, delays.
  double dup = 0;
  double reorder = 0;
  std::uint32_t delay_us = 0;
  std::uint32_t link_delay_us = 0;
  std::uint32_t kill = 0;  // non-sender members SIGKILLed mid-run
  /// shm: non-sender members that die (SIGKILL, by their own hand) halfway through
  /// copying a large message's block into a peer's inbox, holding its lock
  /// (transport/shm/crash_point.hpp): armed mid-run, each dies at its next such copy.
  std::uint32_t kill_mid_write = 0;
  /// The same for senders (never member 1): each dies halfway through writing a
  /// long datagram into its own multicast log (or a block into a peer's inbox);
  /// the survivors must agree on its messages, as with kill_senders.
  std::uint32_t kill_senders_mid_write = 0;
  /// Senders SIGKILLed mid-run (never member 1, whose figures the reports use): the
  /// survivors must agree on which of a dead sender's messages they delivered.
  std::uint32_t kill_senders = 0;
  /// Host leaders (each host's member with the smallest id; never member 1) SIGKILLed
  /// mid-run, sender or not: the two-level group must carry on under the next leader.
  std::uint32_t kill_leaders = 0;
  /// The membership manager (in this process) is stopped mid-run, as if its process
  /// died: every member must stop with manager_lost, soon, and none hang.
  bool kill_manager = false;
  std::uint32_t join = 0;  // members started once the group runs (they join mid-stream)
  /// "embedded": one manager in this process. "zookeeper": `managers` processes of
  /// `hmcast manager --zookeeper` stand for the coordinator's seat in `zookeeper`.
  std::string membership = "embedded";
  std::string zookeeper;                // the ensemble (default: $HMCAST_ZK)
  std::uint32_t managers = 2;
  std::uint32_t kill_coordinator = 0;   // SIGKILL the seated manager mid-run (0 or 1)
  /// SIGKILL the ensemble's leader server mid-run (0 or 1): needs $HMCAST_ZK_PIDS
  /// (port:pid,...; tests/zk/ensemble.py sets it).
  std::uint32_t kill_zk_leader = 0;
  /// Non-sender members whose host is cut off mid-run by `cut_command` ({i}: the
  /// member's host index), e.g. `ip link set hmv{i} down` on the emulated cluster;
  /// once each has stopped, `heal_command` restores its host and a new member joins
  /// from it.
  std::uint32_t partition = 0;
  std::string cut_command;
  std::string heal_command;
  std::string group = "demo";
  /// Command words put in front of each member; "{i}" becomes its host's 1-based
  /// index (its own index unless per_host > 1).
  std::vector<std::string> prefix;
  /// Each member's local address; "{i}" as in `prefix`.
  std::string interface_template = "127.0.0.1";
  /// Members per host: member i's {i} in `prefix` and `interface_template` is its host,
  /// (i - 1) / per_host + 1 (the emulated cluster with several processes per namespace).
  std::uint32_t per_host = 1;
  /// Where the manager listens (reachable from every member).
  std::string manager_host = "127.0.0.1";
  std::uint32_t mtu = 0;  // 0: the transport's default
  /// "socket" or "verbs" (the members' transport; membership is TCP either way).
  std::string transport = "socket";
  /// verbs: the RDMA device (empty: the first with an active port) and the
  /// completion mode (hybrid, poll, interrupt).
  std::string device;
  std::string completion = "hybrid";
  std::uint32_t timeout_s = 600;
  std::uint32_t progress_ms = 250;
  std::ostream* progress = nullptr;  // where progress lines go (none if null)
  bool serial = false;      // senders wait for each completion (latency, not load)
  bool timestamps = false;  // measure delivery at the last receiver of member 1's messages
  bool span_only = false;   // with timestamps: only a stream's span (members' --span-only)
  /// The first this many of each sender's `messages` warm the group up (connections,
  /// buffers, the kernel's TCP windows) and are left out of the latency percentiles, as
  /// hmcast_mpi_bench leaves out its warm-up broadcasts.
  std::uint32_t warmup = 0;
  /// How much of each delivery members check ("full" or "sampled": see tools/workload.hpp).
  std::string verify = "full";
  /// More words for every member's command line (policy overrides: --radix, --algo,
  /// --block, --profile; see `hmcast member --help`).
  std::vector<std::string> member_args;
  /// Every member drops every datagram it receives (a network where multicast does
  /// not work): the multicast probe fails and the group emulates multicast.
  bool block_multicast = false;
  std::uint32_t probe_deadline_ms = 0;  // members' multicast probe deadline (0: the default)
  bool spray = false;       // a hostile peer sprays bad input at the group while it runs (sprayer.hpp)
  /// A stranger who hears the group forges members' datagrams and replays captured
  /// ones (forger.hpp); members must deliver none of it (forged_accepted).
  bool spray_forged = false;
  /// The group key every member reads (`hmcast member --key-file`); empty: none.
  std::string key_file;
  /// Bind member i to CPU i (mod the CPUs this process may use) when every member
  /// has a CPU of its own, as mpirun binds ranks to cores: on fewer CPUs than
  /// members nothing is bound (the scheduler moves them to whichever core is idle).
  bool bind = true;
};

struct GroupRunReport {
  std::uint32_t procs = 0;
  std::uint64_t shm_files_left = 0;  // shm: files of the group still in /dev/shm after every member is gone
  /// --kill-mid-write: the members that said they died mid-copy (their reports), and
  /// what the survivors saw of it: inbox locks taken over from a dead holder, and
  /// frames dropped unfinished.
  std::uint32_t killed_mid_write = 0;
  nlohmann::json mid_write_kills = nlohmann::json::array();
  std::uint64_t shm_locks_recovered = 0;
  std::uint64_t shm_partial_frames_dropped = 0;
  std::uint64_t shm_datagrams_waited = 0;
  std::uint64_t shm_multicast_overruns = 0;
  std::uint64_t shm_datagrams_copied = 0;
  /// The hosts the members' last views named (GroupStats::hosts, the most any
  /// member reported) and how many members said they lead their host.
  std::uint32_t hosts = 0;
  std::uint32_t host_leaders = 0;
  std::uint32_t senders = 0;
  std::uint64_t messages_sent = 0;  // senders x messages
  std::uint64_t completed = 0;      // all-acked at their senders
  bool delivered_ok = false;
  std::uint64_t duplicates_delivered = 0;
  std::uint64_t missing = 0;
  std::uint64_t corrupt = 0;
  std::uint64_t fifo_violations = 0;
  bool digests_agree = false;
  std::uint32_t members_verified = 0;  // survivors whose every check passed
  std::uint32_t survivors = 0;
  std::uint32_t senders_killed = 0;
  std::uint32_t leaders_killed = 0;  // of them and the other victims: host leaders when struck
  bool manager_killed = false;
  std::uint32_t members_stopped_manager_lost = 0;  // members that stopped saying the manager is gone
  double manager_loss_to_stop_ms = 0;              // the manager's death -> the last of them stopped
  bool manager_loss_ok = false;  // --kill-manager: every member stopped that way, none hung
  std::string membership = "embedded";
  std::uint32_t coordinators_killed = 0;
  bool zk_leader_killed = false;
  /// The seated manager's death -> the last survivor installed a view issued after it
  /// (by its successor, once the members rejoined).
  double coordinator_failover_ms = 0;
  std::uint64_t send_failures = 0;  // broadcasts that failed at their senders (all members)
  // --partition: members cut off, those that stopped by themselves (and why, and how
  // long after the cut), what they delivered after the cut (in flight at that moment:
  // nothing reaches them after it), and the new members that joined from their hosts.
  std::uint32_t cut_members = 0;
  std::uint32_t cut_stopped = 0;
  std::string cut_stop_reason;
  double cut_stop_ms = 0;
  std::uint64_t cut_delivered_after_cut = 0;
  /// The survivors' first view without a cut member -> that member's last delivery
  /// (the least over cut members; negative would be a delivery after its removal).
  double cut_last_delivery_before_removal_ms = 1e18;
  std::uint32_t rejoined = 0;
  /// Per killed sender, survivors whose delivered set of its messages (count and
  /// digest) differs from the one most survivors have; summed over killed senders.
  std::uint64_t disagreements = 0;
  /// Per killed sender (by member id), how many of its messages the survivors delivered.
  nlohmann::json dead_sender_delivered = nlohmann::json::object();
  std::uint32_t joined = 0;               // members that joined mid-stream and reported
  std::uint64_t joiner_delivered = 0;     // messages those delivered (all sent in their view or later)
  std::int64_t joiner_first_index = -1;   // lowest index a joiner started at (of any sender)
  std::uint64_t views_installed = 0;
  double view_change_ms = 0;  // max over kills and survivors: kill -> new view without the victim
  std::uint64_t bad_packets_dropped = 0;
  std::uint64_t repairs_sent = 0;
  std::uint64_t batches_sent = 0;       // Batch datagrams, all members (GroupStats)
  std::uint64_t datagrams_batched = 0;  // datagrams that went inside them
  std::uint64_t small_fragments_placed = 0;  // fragments read straight into their message (GroupStats)
  // Large messages a view change cut, started again by their senders (summed over the
  // survivors), and those restarts received again by members that had them.
  std::uint64_t large_restarted = 0;
  std::uint64_t large_redeliveries_suppressed = 0;
  // A dead sender's large messages: commits survivors relayed, messages delivered on a
  // relay, and messages held whole but never committed (discarded everywhere).
  std::uint64_t large_commits_relayed = 0, large_delivered_on_relay = 0, large_uncommitted_discarded = 0;
  // What the fault layers did, summed over the members that reported (not the killed).
  std::uint64_t faults_dropped = 0, faults_duplicated = 0, faults_reordered = 0, faults_delayed = 0,
                faults_link_delayed = 0, faults_released_early = 0;
  std::string transport = "socket";
  // Summed over the members that reported: datagrams their transport multicast and
  // bytes it sent on reliable links (verbs: UD QP and RC QPs; 0 on other transports).
  // The multicast probe (GroupStats::multicast_probe), over the members that reported.
  std::uint64_t probes_confirmed = 0;   // members whose last probe every member confirmed
  std::uint64_t probes_failed = 0;      // members whose probe went unconfirmed
  std::uint64_t members_emulating = 0;  // members that ended with multicast emulated
  std::uint64_t emulated_datagrams = 0;
  std::uint64_t ud_multicast_datagrams = 0;
  std::uint64_t rc_bytes = 0;
  std::uint64_t large_bytes_placed = 0;  // Block payload bytes transports placed straight into final buffers
  double members_cpu_s = 0;       // CPU seconds the reporting members used (user + system)
  double members_cpu_user_s = 0;  // ... of which in user space
  double members_cpu_since_join_s = 0;  // ... of which after each had joined (the traffic's share)
  std::uint64_t large_regions_held = 0;  // verbs: final buffers still registered when members reported
  std::uint64_t bytes_broadcast = 0;  // payload bytes of all messages, once
  double wall_s = 0;                  // first member joined -> last member done
  double latency_p50_us = 0, latency_p99_us = 0, latency_max_us = 0;
  double throughput_mb_s = 0;  // bytes_broadcast / wall_s: what each member received per second
  // With timestamps: broadcast() call -> the last member's delivery, member 1's messages.
  double last_delivery_p50_us = 0, last_delivery_p99_us = 0;
  double send_span_s = 0;  // member 1's first broadcast -> its last message's last delivery
  double acked_span_s = 0;  // member 1's first broadcast -> its last completion (all-acked)
  bool timed_out = false;
  std::uint64_t forged_accepted = 0;   // forged messages members delivered (summed)
  std::uint64_t auth_failures = 0;     // frames members dropped for a missing or wrong tag (summed)
  std::uint64_t replays_refused = 0;   // genuine frames members dropped as replays (summed)
  std::uint64_t forge_captured = 0;    // --spray-forged: the group's datagrams the forger heard
  std::uint64_t forge_replayed = 0;    // ...sent again
  std::uint64_t forge_data = 0;        // ...data forged as members'
  std::uint64_t forge_stable = 0;      // ...stability announcements forged as members'
  std::uint64_t forge_link_frames = 0; // ...ACKs and repairs sent on links opened as another member
  std::uint64_t forge_joins_tried = 0; // ...attempts to join through the manager
  std::uint64_t forge_joins_admitted = 0;  // ...that the manager welcomed (with a key: must be 0)
  std::uint64_t spray_datagrams = 0;        // bad datagrams sprayed at the group
  std::uint64_t spray_tcp_attempts = 0;     // bad TCP streams members' link ports accepted
  std::uint64_t spray_tcp_disconnected = 0; // ...that the member hung up on
  std::uint64_t spray_tcp_unreachable = 0;  // connections refused: the member was gone
  std::uint64_t spray_link_frames = 0;      // verbs: bad frames sent to members over RC links
  std::vector<std::string> problems;  // what went wrong, readable
  nlohmann::json manager_views = nlohmann::json::array();  // each view the manager issued: id, size, who left
  nlohmann::json policy = nlohmann::json::object();  // what member 1's policy chose (GroupStats)

  [[nodiscard]] nlohmann::json to_json() const;
};

GroupRunReport run_group(const GroupRunOptions& o);

}  // namespace hmcast::tools
