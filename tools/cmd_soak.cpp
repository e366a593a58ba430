// `hmcast soak`: N member processes, S senders, M messages each, optional faults
// (loss, duplication, reordering, delays: the fault layer in each member),
// SIGKILLed members and members joining mid-run; the verdict and the figures as
// one JSON line.
#include <iostream>

#include "commands.hpp"
#include "core/wire.hpp"
#include "group_runner.hpp"

namespace hmcast::tools {

void add_soak_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("soak", "Many processes, many messages, loss and kills; a JSON verdict");
  auto o = std::make_shared<GroupRunOptions>();
  o->sizes = "64:40,512:20,2KiB:20,8KiB:15,64KiB:5";
  o->messages = 1000;
  o->progress_ms = 100;
  o->group = "soak";
  auto json = std::make_shared<bool>(false);
  auto transport = std::make_shared<std::string>("socket+shm");
  cmd->add_option("--procs", o->procs, "Member processes")->check(CLI::Range(1U, 1024U))->capture_default_str();
  cmd->add_option("--senders", o->senders, "Members that broadcast")->capture_default_str();
  cmd->add_option("--messages", o->messages, "Messages per sender")->capture_default_str();
  cmd->add_option("--sizes", o->sizes, "Sizes with weights (SIZE[:WEIGHT],...)")->capture_default_str();
  cmd->add_option("--loss", o->loss, "Datagram loss at each receiver")->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--dup", o->dup, "Chance a received datagram is duplicated")->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--reorder", o->reorder, "Chance a received datagram is held back until later ones overtake it")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--delay-us", o->delay_us, "Received datagrams delayed by [0, N] microseconds")
      ->check(CLI::Range(0U, 10'000'000U));
  cmd->add_option("--link-delay-us", o->link_delay_us, "Received link frames delayed by [0, N] us (links stay FIFO)")
      ->check(CLI::Range(0U, 10'000'000U));
  cmd->add_option("--kill", o->kill, "Non-sender members SIGKILLed mid-run");
  cmd->add_option("--kill-mid-write", o->kill_mid_write,
                  "shm: non-sender members that SIGKILL themselves halfway through copying a large message's block "
                  "into a peer's inbox (holding its lock): nothing torn may be delivered, and no file may be left");
  cmd->add_option("--kill-senders-mid-write", o->kill_senders_mid_write,
                  "shm: senders (never member 1) that SIGKILL themselves halfway through writing a long datagram "
                  "into their own multicast log (or a block into a peer's inbox): the survivors must agree on their "
                  "messages, as with --kill-senders");
  cmd->add_option("--kill-senders", o->kill_senders,
                  "Senders SIGKILLed mid-run (never member 1): the survivors must deliver the same of their messages");
  cmd->add_option("--kill-leaders", o->kill_leaders,
                  "Host leaders (each host's smallest member id; never member 1) SIGKILLed mid-run, senders or not: "
                  "the next member of the host leads it");
  cmd->add_flag("--kill-manager", o->kill_manager,
                "Stop the membership manager mid-run (as if its process died): every member must stop with "
                "manager_lost and none hang (the verdict is manager_loss_ok)");
  cmd->add_option("--join", o->join, "Members started mid-run that join the running group");
  cmd->add_option("--partition", o->partition,
                  "Non-sender members whose host --cut-command cuts off mid-run: each must stop by itself, the rest "
                  "carry on; then --heal-command restores the host and a new member joins from it");
  cmd->add_option("--cut-command", o->cut_command, "Shell command that cuts host {i} off (tests/cluster/soak.sh sets it)");
  cmd->add_option("--heal-command", o->heal_command, "Shell command that restores host {i}");
  cmd->add_option("--membership", o->membership,
                  "embedded: one manager in this process; zookeeper: --managers processes of `hmcast manager "
                  "--zookeeper` stand for the coordinator's seat, and take over from each other")
      ->check(CLI::IsMember({"embedded", "zookeeper"}))
      ->capture_default_str();
  cmd->add_option("--zookeeper", o->zookeeper, "ZooKeeper ensemble HOST:PORT,... (default: $HMCAST_ZK)");
  cmd->add_option("--managers", o->managers, "--membership zookeeper: manager processes")
      ->check(CLI::Range(1U, 16U))
      ->capture_default_str();
  cmd->add_option("--kill-coordinator", o->kill_coordinator,
                  "SIGKILL the seated manager mid-run (--membership zookeeper): a standing one takes over and "
                  "no broadcast may fail")
      ->check(CLI::Range(0U, 1U));
  cmd->add_option("--kill-zk-leader", o->kill_zk_leader,
                  "SIGKILL the ZooKeeper ensemble's leader mid-run (needs $HMCAST_ZK_PIDS, as tests/zk/ensemble.py sets)")
      ->check(CLI::Range(0U, 1U));
  cmd->add_option("--seed", o->seed, "Workload, fault and kill seed")->capture_default_str();
  cmd->add_option("--transport", *transport,
                  "socket+shm (the two-level group: shared memory between members of a host, the socket between "
                  "hosts), socket (UDP multicast and TCP only), verbs or shm (members on one host; the simulator has "
                  "`hmcast sim small`)")
      ->capture_default_str();
  cmd->add_option("--device", o->device, "verbs: RDMA device (default: the first with an active port)");
  cmd->add_option("--completion", o->completion, "verbs: hybrid, poll or interrupt")
      ->check(CLI::IsMember({"hybrid", "poll", "interrupt"}))
      ->capture_default_str();
  cmd->add_option("--prefix", o->prefix, "Command words before each member ({i}: its index), e.g. ip netns exec hm{i}")
      ->expected(0, -1)->delimiter(' ');
  cmd->add_option("--interface-template", o->interface_template, "Each member's address ({i}: its index)")
      ->capture_default_str();
  cmd->add_option("--manager-host", o->manager_host, "Address the manager listens on")->capture_default_str();
  cmd->add_option("--per-host", o->per_host,
                  "Members per host: the {i} of --prefix and --interface-template is member i's host, (i - 1) / N + "
                  "1; without --prefix, socket+shm members on this machine name host{i} as their host")
      ->check(CLI::Range(1U, 1024U));
  cmd->add_option("--mtu", o->mtu, "Largest datagram (default: the transport's)")->check(CLI::Range(256U, static_cast<unsigned>(wire::kMaxDatagram)));
  cmd->add_option("--timeout", o->timeout_s, "Seconds before the run is called failed")->capture_default_str();
  cmd->add_flag("--json", *json, "Print the result as one JSON line (last line of output)");
  cmd->add_flag("--block-multicast", o->block_multicast,
                "Every member drops every datagram it receives: the multicast probe fails and the group "
                "emulates multicast over reliable links");
  cmd->add_option("--probe-deadline-ms", o->probe_deadline_ms,
                  "Members' multicast probe deadline (default: the protocol's, 3000)")
      ->check(CLI::Range(1U, 600'000U));
  cmd->add_flag("--spray", o->spray, "A hostile peer sprays garbage, truncated, oversized, stale-view and "
                                     "non-member packets and malformed TCP streams at the group");
  cmd->add_flag("--spray-forged", o->spray_forged,
                "A stranger listens to the group, forges data and stability announcements as its members and "
                "replays what it heard: no member may deliver a forged message (forged_accepted)");
  cmd->add_option("--key-file", o->key_file, "The group key every member reads (`hmcast keygen`; mode 600)");
  auto no_zero_copy = std::make_shared<bool>(false);
  cmd->add_flag("--no-zero-copy", *no_zero_copy,
                "verbs: members SEND and copy large blocks instead of RDMA WRITING them into the final buffer");
  auto no_bind = std::make_shared<bool>(false);
  cmd->add_flag("--no-bind", *no_bind,
                "Never bind members to CPUs (by default each gets one when there are enough, as mpirun does)");
  auto progress = std::make_shared<std::string>("thread");
  cmd->add_option("--progress", *progress,
                  "Who makes the members' group progress: each Node's thread, or the caller (Config::progress)")
      ->check(CLI::IsMember({"thread", "caller"}))
      ->capture_default_str();
  cmd->callback([cmd, o, json, transport, no_zero_copy, no_bind, progress] {
    o->bind = !*no_bind;
    if (*no_zero_copy) o->member_args.emplace_back("--no-zero-copy");
    if (*progress != "thread") o->member_args.insert(o->member_args.end(), {"--progress", *progress});
    if (*transport != "socket" && *transport != "verbs" && *transport != "shm" && *transport != "socket+shm")
      throw CLI::ValidationError("--transport",
                                 "'socket', 'verbs' or 'shm' run processes; for the simulator use `hmcast sim small`");
    o->transport = *transport;
    if (o->membership != "zookeeper" && (o->kill_coordinator > 0 || o->kill_zk_leader > 0))
      throw CLI::ValidationError("--kill-coordinator", "--kill-coordinator and --kill-zk-leader need --membership zookeeper");
    if (o->partition > 0 && (o->cut_command.empty() || o->heal_command.empty()))
      throw CLI::ValidationError("--partition", "--partition needs --cut-command and --heal-command");
    if (o->membership == "zookeeper" && (o->spray || o->spray_forged))
      throw CLI::ValidationError("--spray", "--spray and --spray-forged need the embedded manager (it tells them the "
                                            "group's address): leave out --membership zookeeper");
    if (o->membership == "zookeeper" && o->kill_manager)
      throw CLI::ValidationError("--kill-manager", "with --membership zookeeper, use --kill-coordinator");
    if (*transport == "verbs") {
      if (cmd->count("--mtu") == 0) o->mtu = 4096;  // the UD MTU; the socket default is larger
      if (o->mtu > 4096) throw CLI::ValidationError("--mtu", "verbs datagrams carry at most 4096 bytes");
    }
    o->progress = &std::cerr;
    const auto r = run_group(*o);
    if (*json) {
      std::cout << r.to_json().dump() << std::endl;
    } else {
      std::cout << r.to_json().dump(2) << std::endl;
    }
    if (o->kill_manager ? !r.manager_loss_ok : !r.delivered_ok) throw CLI::RuntimeError(3);
  });
}

}  // namespace hmcast::tools
