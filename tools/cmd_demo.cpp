// `hmcast demo`: the quick start's main job. A local group of member processes in
// the two-level group (socket+shm: on one host, its shared memory; --transport
// socket for UDP multicast and TCP on loopback), several senders, small and large
// messages; every member checks every byte; a readable summary and the verdict.
// `hmcast demo --sim` shows the same guarantees in the deterministic simulator.
#include <iomanip>
#include <iostream>

#include "commands.hpp"
#include "group_runner.hpp"
#include "size_text.hpp"
#include "sim/small_scenario.hpp"
#include "workload.hpp"

namespace hmcast::tools {

namespace {

bool run_sim_demo(std::uint32_t nodes) {
  std::cout << "hmcast demo --sim: " << nodes << " members in the deterministic simulator (100 Gb/s, 2 us hops)\n";
  bool ok = true;
  struct Step {
    const char* what;
    double loss;
    std::uint32_t crash;
  };
  const Step steps[] = {{"clean network", 0.0, 0}, {"5% datagram loss, 1% duplicates, 5% reordering", 0.05, 0},
                        {"5% loss and one member crashing mid-run", 0.05, 1}};
  for (const auto& st : steps) {
    sim::SmallScenario sc;
    sc.nodes = nodes;
    sc.senders = std::min<std::uint32_t>(4, nodes);
    sc.messages = 500;
    sc.size = 2048;
    sc.crash = nodes > 5 ? st.crash : 0;
    sc.network.loss = st.loss;
    sc.network.duplicate = st.loss > 0 ? 0.01 : 0;
    sc.network.reorder = st.loss > 0 ? 0.05 : 0;
    sc.seed = 7;
    const auto r = sim::run_small(sc);
    std::cout << "\n" << st.what << ":\n"
              << "  " << r.completed << "/" << r.messages_sent << " broadcasts of " << sc.size
              << " B all-acked by every member; all-acked latency p50 " << tools::format_duration_us(r.completion_p50_us)
              << ", p99 " << tools::format_duration_us(r.completion_p99_us) << "\n"
              << "  " << r.datagrams_sent << " datagrams, " << r.acks_sent << " ACK packets (cumulative), "
              << r.repairs << " repairs, " << r.views_installed - 1 << " view change(s)\n"
              << "  every surviving member delivered each message once, in order, intact: "
              << (r.delivered_ok ? "yes" : "NO") << "\n";
    ok = ok && r.delivered_ok;
  }
  return ok;
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto* demo = app.add_subcommand("demo", "Run a local group of processes and show what hmcast guarantees");
  auto o = std::make_shared<GroupRunOptions>();
  o->messages = 150;
  o->sizes = "64:40,1KiB:30,16KiB:20,256KiB:6,4MiB:2";
  o->group = "demo";
  // The two-level group: members that share a host (all of them here) share memory.
  o->transport = "socket+shm";
  auto use_sim = std::make_shared<bool>(false);
  demo->add_option("--nodes", o->procs, "Member processes")->check(CLI::Range(2U, 256U))->capture_default_str();
  demo->add_option("--senders", o->senders, "Members that broadcast")->capture_default_str();
  demo->add_option("--messages", o->messages, "Messages per sender")->capture_default_str();
  demo->add_option("--sizes", o->sizes, "Sizes with weights (SIZE[:WEIGHT],...)")->capture_default_str();
  demo->add_option("--loss", o->loss, "Datagram loss injected at each receiver")->check(CLI::Range(0.0, 0.5));
  demo->add_option("--transport", o->transport,
                   "socket+shm (shared memory between members of a host, the socket between hosts), socket (UDP "
                   "multicast and TCP on loopback) or shm")
      ->check(CLI::IsMember({"socket+shm", "socket", "shm"}))
      ->capture_default_str();
  demo->add_flag("--sim", *use_sim, "Run in the deterministic simulator instead of processes");
  demo->callback([o, use_sim] {
    if (*use_sim) {
      const bool ok = run_sim_demo(o->procs);
      std::cout << "\nverdict: " << (ok ? "PASS" : "FAIL") << "\n";
      if (!ok) throw CLI::RuntimeError(3);
      return;
    }
    o->senders = std::min(o->senders, o->procs);
    o->progress = &std::cout;
    const char* media = o->transport == "socket"
                            ? "socket transport: UDP multicast on loopback, TCP links"
                            : o->transport == "shm" ? "shm transport: one shared-memory log and inbox per member"
                                                    : "socket+shm: they share this host, so its shared memory carries "
                                                      "everything; UDP multicast and TCP would carry what crosses hosts";
    std::cout << "hmcast demo: " << o->procs << " member processes on this host (" << media << "), " << o->senders
              << " senders x " << o->messages << " messages, sizes " << SizeMix::parse(o->sizes).to_string() << "\n"
              << "large messages take the RDMC binomial pipeline, block by block\n\n";
    const auto r = run_group(*o);
    std::cout << std::fixed << std::setprecision(1) << "\n"
              << "messages:   " << r.completed << " of " << r.messages_sent << " broadcasts all-acked at their senders"
              << "\n"
              << "bytes:      " << static_cast<double>(r.bytes_broadcast) / 1e6 << " MB broadcast, delivered to each of "
              << r.survivors << " members\n"
              << "latency:    all-acked p50 " << tools::format_duration_us(r.latency_p50_us) << ", p99 "
              << tools::format_duration_us(r.latency_p99_us) << ", max " << tools::format_duration_us(r.latency_max_us)
              << "\n"
              << "throughput: " << r.throughput_mb_s << " MB/s into every member (" << r.wall_s << " s)\n"
              << "repairs:    " << r.repairs_sent << " point-to-point; bad packets dropped: " << r.bad_packets_dropped
              << "\n"
              << "verified:   " << r.members_verified << " of " << r.survivors
              << " members checked every byte of every message they received, exactly once, in sender order; digests agree: "
              << (r.digests_agree ? "yes" : "NO") << "\n";
    for (const auto& p : r.problems) std::cout << "problem:    " << p << "\n";
    std::cout << "\nverdict: " << (r.delivered_ok ? "PASS" : "FAIL") << "\n";
    if (!r.delivered_ok) throw CLI::RuntimeError(3);
  });
}

}  // namespace hmcast::tools
