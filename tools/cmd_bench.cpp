// `hmcast bench`: latency and throughput by message size and group size.
//   socket: real processes on loopback (or the emulated cluster through --prefix):
//     latency    one sender, one message at a time: p50/p99 of all-acked completion
//                at the sender and of delivery at the last receiver;
//     throughput one sender streaming: bytes / (first broadcast -> last delivery).
//   sim: the deterministic simulator (100 Gb/s, 2 us hops): the small path's
//     all-acked latency under a stream, the large path's time per message.
// Output: a table, and CSV (--csv FILE) and JSON (--json, the last line).
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>

#include "calibrate.hpp"
#include "commands.hpp"
#include "core/wire.hpp"
#include "group_runner.hpp"
#include "hmcast/config.hpp"
#include "sim/large_scenario.hpp"
#include "sim/small_scenario.hpp"
#include "workload.hpp"

namespace hmcast::tools {

namespace {

struct Row {
  std::string transport;
  std::uint32_t procs = 0;
  std::uint64_t size = 0;
  std::uint32_t latency_messages = 0;
  double complete_p50_us = 0, complete_p99_us = 0;
  double deliver_p50_us = 0, deliver_p99_us = 0;
  std::uint32_t throughput_messages = 0;
  double throughput_mb_s = 0;
  // The same stream timed to its last message's all-acked completion at the sender.
  double stream_msgs_per_s = 0;
  // CPU seconds all members used (user + system, the run's whole life: joining, polling,
  // leaving) per GB delivered to the receivers, in the latency and the throughput run.
  double latency_cpu_s_per_gb = 0, throughput_cpu_s_per_gb = 0;
  bool ok = false;
  nlohmann::json policy = nlohmann::json::object();  // what the policy chose (socket)
  std::uint32_t hosts = 0;         // hosts the members' views named (GroupStats::hosts)
  std::uint32_t host_leaders = 0;  // members that said they lead their host
};

/// How the socket runs go: latency only, a fixed message count.
struct Knobs {
  bool latency_only = false;
  bool throughput_only = false;
  std::uint32_t messages = 0;  // latency messages (0: by size, times --scale)
  // Broadcasts before a latency row's measured ones, left out of its percentiles:
  // hmcast_mpi_bench's default, so both sides of a comparison start warm.
  std::uint32_t warmup = 3;
};

/// Enough messages for stable percentiles without hours of copying large ones.
std::uint32_t latency_count(std::uint64_t size, double scale) {
  const double n = size <= (64U << 10) ? 400 : size <= (2U << 20) ? 40 : 6;
  return std::max<std::uint32_t>(3, static_cast<std::uint32_t>(n * scale));
}
std::uint32_t throughput_count(std::uint64_t size, double scale) {
  const double n = size <= 4096 ? 5000 : size <= (2U << 20) ? 200 : 8;
  return std::max<std::uint32_t>(3, static_cast<std::uint32_t>(n * scale));
}

/// CPU seconds per GB that `rep`'s receivers got (bytes broadcast x receivers): the
/// members' CPU from their join to the end of their run (what the traffic cost, polling
/// included; hmcast_mpi_bench counts Open MPI's ranks the same way, after MPI_Init).
double cpu_per_gb(const GroupRunReport& rep, std::uint32_t procs) {
  const double receivers = procs > 1 ? procs - 1 : 1;
  const double gb = static_cast<double>(rep.bytes_broadcast) * receivers / 1e9;
  return gb > 0 ? rep.members_cpu_since_join_s / gb : 0;
}

/// A row of real member processes on `transport` (socket or shm).
Row process_row(const std::string& transport, std::uint32_t procs, std::uint64_t size, double scale,
                const GroupRunOptions& base, const Knobs& k) {
  Row r;
  r.transport = transport;
  r.procs = procs;
  r.size = size;
  GroupRunOptions o = base;
  o.transport = transport;
  o.procs = procs;
  o.senders = 1;
  o.sizes = std::to_string(size);
  o.timestamps = true;
  o.verify = "sampled";  // as the Open MPI baseline checks its buffers
  o.group = "bench";
  o.serial = true;
  r.latency_messages = k.messages != 0 ? k.messages : latency_count(size, scale);
  o.warmup = k.warmup;
  o.messages = r.latency_messages + k.warmup;
  // What the group looked like (member 1's report): the run the row's latency or,
  // with --throughput-only, its throughput comes from.
  const auto describe = [&r](const GroupRunReport& rep) {
    r.policy = rep.policy;
    r.hosts = rep.hosts;
    r.host_leaders = rep.host_leaders;
  };
  GroupRunReport lat;
  if (k.throughput_only) {
    lat.delivered_ok = true;
    r.latency_messages = 0;
  } else {
    lat = run_group(o);
  }
  r.complete_p50_us = lat.latency_p50_us;
  r.complete_p99_us = lat.latency_p99_us;
  r.deliver_p50_us = lat.last_delivery_p50_us;
  r.deliver_p99_us = lat.last_delivery_p99_us;
  describe(lat);
  r.latency_cpu_s_per_gb = cpu_per_gb(lat, procs);
  if (k.latency_only) {
    r.ok = lat.delivered_ok;
    return r;
  }
  o.serial = false;
  // Open MPI's stream broadcasts its warm-up, then a barrier, then starts the clock:
  // the sender here broadcasts as many first and waits until they are all-acked.
  // The members are new processes for each row, so without it the span would also
  // time their first wake-ups, which Open MPI's (spinning in that barrier) never pay.
  o.warmup = k.warmup;
  // Open MPI's stream checks each message's stamp and the last one's pattern, not
  // every buffer: the members check the same, so the stream times the libraries.
  o.verify = "stamp";
  // Nor does it read a clock per message: the stream's span is timed, not each one.
  o.span_only = true;
  r.throughput_messages = throughput_count(size, scale);
  o.messages = r.throughput_messages + o.warmup;
  const auto tp = run_group(o);
  r.throughput_cpu_s_per_gb = cpu_per_gb(tp, procs);  // the warm-up's included, as Open MPI's is
  if (k.throughput_only) describe(tp);
  const double timed = r.throughput_messages;
  r.stream_msgs_per_s = tp.acked_span_s > 0 ? timed / tp.acked_span_s : 0;
  r.throughput_mb_s = tp.send_span_s > 0 ? timed * static_cast<double>(size) / 1e6 / tp.send_span_s : 0;
  r.ok = lat.delivered_ok && tp.delivered_ok;
  return r;
}

Row sim_row(std::uint32_t procs, std::uint64_t size, double scale) {
  Row r;
  r.transport = "sim";
  r.procs = procs;
  r.size = size;
  if (size <= ProtocolConfig{}.max_small_message) {
    sim::SmallScenario sc;
    sc.nodes = procs;
    sc.senders = 1;
    sc.messages = r.latency_messages = latency_count(size, scale);
    sc.size = static_cast<std::uint32_t>(size);
    const auto res = sim::run_small(sc);
    r.complete_p50_us = res.completion_p50_us;
    r.complete_p99_us = res.completion_p99_us;
    r.ok = res.delivered_ok;
  } else {
    sim::LargeScenario sc;
    sc.nodes = procs;
    sc.size = size;
    sc.messages = 1;
    r.latency_messages = r.throughput_messages = 1;
    const auto res = sim::run_large(sc);
    r.complete_p50_us = r.complete_p99_us = res.sim_time_us;
    r.deliver_p50_us = r.deliver_p99_us = res.last_delivery_us;
    r.throughput_mb_s = res.last_delivery_us > 0 ? static_cast<double>(size) / res.last_delivery_us : 0;
    r.ok = res.delivered_ok;
  }
  return r;
}

nlohmann::json to_json(const Row& r) {
  return {{"transport", r.transport},          {"procs", r.procs},
          {"size", r.size},                    {"latency_messages", r.latency_messages},
          {"complete_p50_us", r.complete_p50_us}, {"complete_p99_us", r.complete_p99_us},
          {"deliver_p50_us", r.deliver_p50_us},   {"deliver_p99_us", r.deliver_p99_us},
          {"throughput_messages", r.throughput_messages}, {"throughput_mb_s", r.throughput_mb_s},
          {"stream_msgs_per_s", r.stream_msgs_per_s},
          {"latency_cpu_s_per_gb", r.latency_cpu_s_per_gb}, {"throughput_cpu_s_per_gb", r.throughput_cpu_s_per_gb},
          {"ok", r.ok}, {"policy", r.policy}, {"hosts", r.hosts}, {"host_leaders", r.host_leaders}};
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Latency and throughput by size and group size (processes and sim)");
  auto transport = std::make_shared<std::string>("sim,socket+shm");
  auto procs = std::make_shared<std::string>("8");
  auto sizes = std::make_shared<std::string>("64,2KiB,1MiB,64MiB");
  auto scale = std::make_shared<double>(1.0);
  auto csv = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto base = std::make_shared<GroupRunOptions>();
  auto knobs = std::make_shared<Knobs>();
  auto radix = std::make_shared<std::uint32_t>(0);
  auto algo = std::make_shared<std::string>();
  auto block = std::make_shared<std::string>();
  auto profile = std::make_shared<std::string>();
  auto extra = std::make_shared<std::vector<std::string>>();
  auto calibrate = std::make_shared<bool>(false);
  auto profile_out = std::make_shared<std::string>("hmcast-profile.txt");
  cmd->add_option("--transport", *transport,
                  "Comma-separated, of: sim, socket+shm (the two-level group: shared memory inside a host, the "
                  "socket between hosts), socket (UDP multicast and TCP only), shm (shared memory), both (sim and "
                  "socket)")
      ->capture_default_str();
  cmd->add_option("--procs", *procs, "Group sizes, comma-separated")->capture_default_str();
  cmd->add_option("--sizes", *sizes, "Message sizes, comma-separated")->capture_default_str();
  cmd->add_option("--scale", *scale, "Multiply the message counts")->check(CLI::Range(0.01, 100.0));
  cmd->add_option("--csv", *csv, "Also write the table as CSV to this file");
  cmd->add_flag("--json", *json, "Print the rows as one JSON line (last line of output)");
  cmd->add_option("--prefix", base->prefix, "Command words before each member ({i}: its host, see --per-host)")
      ->expected(0, -1)->delimiter(' ');
  cmd->add_option("--interface-template", base->interface_template,
                  "Each member's address ({i}: its host, see --per-host)");
  cmd->add_option("--manager-host", base->manager_host, "Address the manager listens on");
  cmd->add_option("--per-host", base->per_host,
                  "socket: members per host: the {i} of --prefix and --interface-template is member i's host, "
                  "(i - 1) / N + 1; without --prefix, socket+shm members on this machine name host{i} as their host")
      ->check(CLI::Range(1U, 1024U));
  cmd->add_flag("--latency-only", knobs->latency_only, "socket: skip the throughput runs");
  cmd->add_flag("--throughput-only", knobs->throughput_only, "socket: skip the latency runs")->excludes("--latency-only");
  cmd->add_option("--messages", knobs->messages, "socket: latency messages per row (default: by size and --scale)");
  cmd->add_option("--warmup", knobs->warmup,
                  "socket: broadcasts before each latency row's measured ones, left out of its percentiles, and "
                  "before each stream, all-acked before its span starts (as hmcast_mpi_bench's --warmup)");
  cmd->add_option("--mtu", base->mtu, "Largest datagram members send")->check(CLI::Range(256U, static_cast<unsigned>(wire::kMaxDatagram)));
  cmd->add_option("--profile", *profile, "socket: members load this profile file (default: built in)");
  cmd->add_option("--radix", *radix, "socket: override the policy's ACK-tree radix")->check(CLI::Range(2U, 65536U));
  cmd->add_option("--algo", *algo, "socket: large-path schedule: sequential, chain, tree, binomial_pipeline");
  cmd->add_option("--block", *block, "socket: large-path block size for every message (default: the policy's)");
  cmd->add_option("--member-args", *extra, "socket: more words for every member (see `hmcast member --help`)")
      ->expected(0, -1)->delimiter(' ');
  cmd->add_flag("--calibrate", *calibrate,
                "Measure the policy's crossover points on the socket transport (--procs: the group size) and "
                "write a profile file (--profile-out)");
  cmd->add_option("--profile-out", *profile_out, "Where --calibrate writes the profile")->capture_default_str();
  auto no_bind = std::make_shared<bool>(false);
  cmd->add_flag("--no-bind", *no_bind,
                "socket: never bind members to CPUs (by default each gets one when there are enough, as mpirun does)");
  auto progress = std::make_shared<std::string>("thread");
  cmd->add_option("--progress", *progress,
                  "socket: who makes the members' group progress: each Node's thread, or the caller (Config::progress)")
      ->check(CLI::IsMember({"thread", "caller"}))
      ->capture_default_str();
  cmd->callback([=] {
    base->bind = !*no_bind;
    if (*progress != "thread") base->member_args.insert(base->member_args.end(), {"--progress", *progress});
    if (!profile->empty()) base->member_args.insert(base->member_args.end(), {"--profile", *profile});
    if (*radix != 0) base->member_args.insert(base->member_args.end(), {"--radix", std::to_string(*radix)});
    if (!algo->empty()) base->member_args.insert(base->member_args.end(), {"--algo", *algo});
    if (!block->empty()) base->member_args.insert(base->member_args.end(), {"--block", *block});
    for (const auto& w : *extra)
      if (!w.empty()) base->member_args.push_back(w);  // --member-args= (empty) adds nothing
    if (*calibrate) {
      const auto n = static_cast<std::uint32_t>(std::stoul(split_list(*procs).empty() ? "8" : split_list(*procs).back()));
      run_calibration(n, *base, *profile_out, *json);
      return;
    }
    std::set<std::string> media;
    for (const auto& t : split_list(*transport)) {
      if (t == "both") media.insert({"sim", "socket"});
      else if (t == "sim" || t == "socket" || t == "shm" || t == "socket+shm") media.insert(t);
      else throw CLI::ValidationError("--transport", "'" + t + "': choose among sim, socket, shm, socket+shm, both");
    }
    std::vector<Row> rows;
    std::cout << std::left << std::setw(11) << "path" << std::setw(7) << "procs" << std::setw(8) << "size"
              << std::right << std::setw(14) << "complete p50" << std::setw(13) << "p99" << std::setw(15)
              << "last-dlv p50" << std::setw(13) << "p99" << std::setw(12) << "MB/s" << std::setw(12) << "CPU s/GB" << "\n";
    for (const auto& p : split_list(*procs)) {
      const auto n = static_cast<std::uint32_t>(std::stoul(p));
      for (const auto& s : split_list(*sizes)) {
        const auto size = parse_size(s);
        for (const char* t : {"sim", "socket", "shm", "socket+shm"}) {
          if (media.count(t) == 0) continue;
          Row r = std::string(t) == "sim" ? sim_row(n, size, *scale) : process_row(t, n, size, *scale, *base, *knobs);
          std::cout << std::left << std::setw(11) << r.transport << std::setw(7) << r.procs << std::setw(8)
                    << format_size(r.size) << std::right << std::fixed << std::setprecision(1) << std::setw(11)
                    << r.complete_p50_us << " us" << std::setw(10) << r.complete_p99_us << " us" << std::setw(12)
                    << r.deliver_p50_us << " us" << std::setw(10) << r.deliver_p99_us << " us" << std::setw(12)
                    << r.throughput_mb_s << std::setw(12) << std::setprecision(2) << r.latency_cpu_s_per_gb
                    << (r.ok ? "" : "  FAILED") << std::endl;
          rows.push_back(r);
        }
      }
    }
    if (!csv->empty()) {
      std::ofstream f(*csv);
      f << "transport,procs,size,latency_messages,complete_p50_us,complete_p99_us,deliver_p50_us,deliver_p99_us,"
           "throughput_messages,throughput_mb_s,ok\n";
      for (const auto& r : rows)
        f << r.transport << "," << r.procs << "," << r.size << "," << r.latency_messages << "," << r.complete_p50_us
          << "," << r.complete_p99_us << "," << r.deliver_p50_us << "," << r.deliver_p99_us << ","
          << r.throughput_messages << "," << r.throughput_mb_s << "," << (r.ok ? 1 : 0) << "\n";
      if (!f) throw std::runtime_error("cannot write " + *csv);
    }
    if (*json) {
      nlohmann::json all = nlohmann::json::array();
      for (const auto& r : rows) all.push_back(to_json(r));
      std::cout << nlohmann::json{{"rows", all}}.dump() << std::endl;
    }
    for (const auto& r : rows)
      if (!r.ok) throw CLI::RuntimeError(3);
  });
}

}  // namespace hmcast::tools
