// `hmcast sim small`: one deterministic simulated run, replayable from its seed.
#include <malloc.h>

#include <iostream>
#include <memory>

#include "commands.hpp"
#include "policy/defaults.hpp"
#include "sim/large_scenario.hpp"
#include "sim/small_scenario.hpp"

namespace hmcast::tools {

namespace {

void print_small_human(const sim::SmallResult& r) {
  std::cout << "nodes " << r.nodes << ", messages " << r.completed << "/" << r.messages_sent << " completed"
            << ", sim time " << r.sim_time_us << " us\n"
            << "completion p50 " << r.completion_p50_us << " us, p99 " << r.completion_p99_us << " us\n"
            << "datagrams " << r.datagrams_sent << ", p2p " << r.p2p_messages_sent << " (acks " << r.acks_sent
            << ", repairs " << r.repairs << ", re-multicasts " << r.remulticasts << ")\n"
            << "views " << r.views_installed << ", crashed " << r.crashed << ", joined " << r.joined
            << ", emulating multicast " << r.members_emulating << "\n"
            << "verdict: " << (r.delivered_ok ? "every surviving member delivered every completed message once, in order"
                                              : "FAILED")
            << "\n";
  for (const auto& v : r.violations) std::cout << "violation: " << v << "\n";
}

/// A simulated run holds every member's copy of what is in flight (gigabytes at
/// hundreds of members) and frees and allocates message buffers by the million.
/// glibc would hand freed memory back to the kernel and map large buffers one by
/// one, so the run would fault in and zero the same pages over and over; keep
/// what was freed for reuse instead (the process ends with the run).
void keep_freed_memory() {
  constexpr int kNever = 1 << 30;  // bytes: no buffer or trim is this large
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, kNever);
  mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace

void add_large_command(CLI::App* simcmd) {
  auto* large = simcmd->add_subcommand("large", "Large messages: the RC block pipeline over a bandwidth model");
  auto sc = std::make_shared<sim::LargeScenario>();
  auto json = std::make_shared<bool>(false);
  auto algo = std::make_shared<std::string>("binomial_pipeline");
  auto latency_us = std::make_shared<double>(2.0);
  auto overhead_us = std::make_shared<double>(0.0);
  large->add_option("--nodes", sc->nodes, "Group size")->check(CLI::Range(1U, 100000U))->capture_default_str();
  large->add_option("--senders", sc->senders, "Members that broadcast")->check(CLI::PositiveNumber);
  large->add_option("--messages", sc->messages, "Messages per sender")->check(CLI::PositiveNumber);
  large->add_option("--size", sc->size, "Bytes per message (suffixes KiB, MiB, GiB)")
      ->transform(CLI::AsSizeValue(false))->capture_default_str();
  large->add_option("--block", sc->block, "Block size (suffixes KiB, MiB, GiB)")
      ->transform(CLI::AsSizeValue(false))->capture_default_str();
  large->add_option("--segment", sc->segment, "Bytes moved as one transfer, forwarded as soon as held (suffixes KiB, MiB)")
      ->transform(CLI::AsSizeValue(false))->capture_default_str();
  large->add_option("--credit-lead", sc->credit_lead,
                    "Next credit goes out when a receive has at most this many bytes to come (suffixes KiB, MiB)")
      ->transform(CLI::AsSizeValue(false))->capture_default_str();
  large->add_option("--algo", *algo, "binomial_pipeline, chain, sequential or tree")->capture_default_str();
  large->add_option("--link-gbps", sc->link_gbps, "NIC bandwidth per direction")->check(CLI::PositiveNumber);
  large->add_option("--latency-us", *latency_us, "Per-link latency (us)")->check(CLI::Range(0.0, 1e6));
  large->add_option("--block-overhead-us", *overhead_us, "Software cost of posting one transfer (segment) (us)")->check(CLI::Range(0.0, 1e6));
  large->add_option("--slow-links", sc->slow_links, "Links the schedule uses, slowed to --slow-factor");
  large->add_option("--slow-nodes", sc->slow_nodes, "Nodes whose NIC runs at --slow-factor");
  large->add_option("--slow-factor", sc->slow_factor, "Speed of slow links/nodes")->check(CLI::Range(0.01, 1.0));
  large->add_option("--crash", sc->crash, "Non-sender members crashed during the transfer");
  large->add_option("--crash-senders", sc->crash_senders,
                    "Senders crashed during the transfer (never the first): survivors deliver each of their "
                    "messages all or none");
  large->add_option("--per-host", sc->per_host,
                    "Members per host (0 or 1: a host each): blocks cross to each host once, then move inside it");
  large->add_option("--receive-window", sc->receive_window, "Blocks a receiver lets come at once")
      ->check(CLI::Range(1U, 1024U))->capture_default_str();
  large->add_option("--seed", sc->seed, "Seed of the run")->capture_default_str();
  large->add_flag("--json", *json, "Print one JSON object as the last line");
  large->callback([sc, json, algo, latency_us, overhead_us] {
    const auto a = large::parse_algorithm(*algo);
    if (!a) throw std::invalid_argument("unknown --algo '" + *algo + "': use binomial_pipeline, chain, sequential or tree");
    if (sc->block == 0) throw std::invalid_argument("--block must be at least 1 byte");
    if (sc->segment == 0) throw std::invalid_argument("--segment must be at least 1 byte");
    sc->algorithm = *a;
    sc->latency_ns = static_cast<TimeNs>(*latency_us * 1000.0);
    sc->block_overhead_ns = static_cast<TimeNs>(*overhead_us * 1000.0);
    keep_freed_memory();
    const auto r = sim::run_large(*sc);
    if (*json) {
      std::cout << r.to_json() << std::endl;
    } else {
      std::cout << r.nodes << " members, " << r.size << " bytes in " << r.blocks << " blocks, " << r.algorithm
                << " (" << r.steps << " steps)\n"
                << "last member had every byte at " << r.last_delivery_us << " us; one unicast takes "
                << r.unicast_time_us << " us: ratio " << r.ratio_vs_unicast << "\n"
                << "completed " << r.completed << "/" << r.messages_sent << ", failures " << r.failures
                << (r.failures ? " (" + r.failure_reason + ")" : std::string()) << "\n"
                << "verdict: " << (r.delivered_ok ? "every surviving member holds every completed message" : "FAILED")
                << "\n";
      for (const auto& v : r.violations) std::cout << "violation: " << v << "\n";
    }
    if (!r.delivered_ok) {
      std::cerr << "replay: " << sc->command_line() << "\n";
      throw CLI::RuntimeError(3);
    }
  });
}

void add_sim_commands(CLI::App& app) {
  auto* simcmd = app.add_subcommand("sim", "Run the protocol in the deterministic simulator");
  simcmd->require_subcommand(1);
  add_large_command(simcmd);
  auto* small = simcmd->add_subcommand("small", "Small messages: datagram multicast + cumulative ACK tree");
  auto sc = std::make_shared<sim::SmallScenario>();
  auto json = std::make_shared<bool>(false);
  auto latency_us = std::make_shared<double>(2.0);
  small->add_option("--nodes", sc->nodes, "Group size")->check(CLI::Range(1U, 100000U))->capture_default_str();
  small->add_option("--senders", sc->senders, "Members that broadcast")->check(CLI::PositiveNumber)->capture_default_str();
  small->add_option("--messages", sc->messages, "Messages per sender")->capture_default_str();
  small->add_option("--size", sc->size, "Bytes per message")->capture_default_str();
  small->add_option("--loss", sc->network.loss, "Datagram loss per receiver")->check(CLI::Range(0.0, 0.9));
  small->add_option("--dup", sc->network.duplicate, "Datagram duplication")->check(CLI::Range(0.0, 1.0));
  small->add_option("--reorder", sc->network.reorder, "Datagram reordering")->check(CLI::Range(0.0, 1.0));
  small->add_option("--crash", sc->crash, "Non-sender members crashed mid-run");
  small->add_option("--crash-senders", sc->crash_senders,
                    "Senders crashed mid-run (never the first): the survivors must deliver the same of each");
  small->add_option("--crash-detected", sc->crash_detected,
                    "Chance a crash closes its control connection (else only suspicion finds it)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  small->add_option("--joins", sc->joins, "Members that join mid-run (each with the coordinator's flush)");
  small->add_flag("--block-multicast", sc->block_multicast,
                  "Multicast never reaches one member: the probe must switch the group to emulated multicast");
  small->add_option("--radix", sc->protocol.radix, "ACK-tree radix")->check(CLI::Range(2U, 64U))->capture_default_str();
  small->add_option("--latency-us", *latency_us, "Per-hop latency (us)")->check(CLI::Range(0.0, 1e6))->capture_default_str();
  small->add_option("--mtu", sc->protocol.mtu, "Datagram MTU in bytes")->check(CLI::Range(256U, 65000U))->capture_default_str();
  small->add_option("--window", sc->protocol.window_messages, "Sender window (messages)")->capture_default_str();
  small->add_option("--per-host", sc->per_host, "Members per host (0 or 1: a host each): ACK trees follow hosts");
  small->add_option("--seed", sc->seed, "Seed of the run")->capture_default_str();
  small->add_flag("--json", *json, "Print one JSON object as the last line");
  small->callback([sc, json, latency_us] {
    sc->set_latency(static_cast<TimeNs>(*latency_us * 1000.0));
    if (auto why = policy::check(sc->protocol)) throw std::invalid_argument(*why);
    if (sc->size > sc->protocol.max_small_message)
      throw std::invalid_argument("--size is over the small path's limit of " +
                                  std::to_string(sc->protocol.max_small_message) + " bytes");
    keep_freed_memory();
    const auto r = sim::run_small(*sc);
    if (*json) {
      std::cout << r.to_json() << std::endl;
    } else {
      print_small_human(r);
    }
    if (!r.delivered_ok) {
      std::cerr << "replay: " << sc->command_line() << "\n";
      throw CLI::RuntimeError(3);
    }
  });
}

}  // namespace hmcast::tools
