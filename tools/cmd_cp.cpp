// `hmcast cp`: replicate files or directory trees to every member of a group over
// the large path (cp_send.hpp, cp_receive.hpp, the messages in cp_wire.hpp).
//
//   hmcast cp --receive --group G --manager H:P --size N --into DIR    (on each receiver)
//   hmcast cp --group G --manager H:P --size N [--embed-manager] PATH...   (on the source)
//   hmcast cp --spawn K --into 'DIR/{i}' PATH...    (one command: K receivers on this host)
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "cp_receive.hpp"
#include "cp_send.hpp"
#include "cp_tree.hpp"
#include "hmcast/hmcast.hpp"
#include "process_info.hpp"
#include "size_text.hpp"
#include "transport/socket/manager_server.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::tools {
namespace {

struct CpOptions {
  std::vector<std::string> paths;
  bool receive = false;
  std::string into;
  std::string group = "cp";
  std::string manager = "127.0.0.1:17700";
  bool embed_manager = false;
  std::uint32_t size = 0;  // members, the source included
  std::string interface_address = "127.0.0.1";
  std::string chunk = "64MiB";
  std::string in_flight = "128MiB";
  std::string queue = "256MiB";
  bool no_fsync = false;
  bool json = false;
  bool quiet = false;
  std::uint32_t join_timeout_s = 120;
  std::uint32_t report_timeout_s = 300;
  std::uint32_t spawn = 0;
  std::string prefix;
  std::string crash_after;  // tests: SIGKILL after writing (receiver) or sending (source) this much
};

std::string replace_index(std::string s, std::uint32_t i) {
  for (std::size_t at = s.find("{i}"); at != std::string::npos; at = s.find("{i}", at))
    s.replace(at, 3, std::to_string(i));
  return s;
}

Config node_config(const CpOptions& o, std::uint32_t size) {
  Config cfg;
  cfg.transport = TransportKind::socket;
  cfg.group_size = size;
  cfg.socket.manager = o.manager;
  cfg.socket.embed_manager = o.embed_manager;
  cfg.socket.interface_address = o.interface_address;
  cfg.join_timeout = std::chrono::seconds(o.join_timeout_s);
  return cfg;
}

/// A directory a receiver can write into, made now: better to fail before joining.
void check_into(const std::filesystem::path& into) {
  std::error_code ec;
  std::filesystem::create_directories(into, ec);
  if (ec) throw std::runtime_error("--into " + into.string() + ": " + ec.message());
  if (::access(into.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error("--into " + into.string() + ": " + std::strerror(errno) + " (choose a directory you may write)");
}

int run_receive(const CpOptions& o) {
  if (o.into.empty()) throw CLI::ValidationError("--into", "a receiver needs --into DIR");
  if (o.size < 2) throw CLI::ValidationError("--size", "name the group's members, the source included (at least 2)");
  check_into(o.into);
  cp::ReceiveOptions r;
  r.into = o.into;
  r.fsync = !o.no_fsync;
  r.queue_bytes = parse_size(o.queue);
  if (!o.crash_after.empty()) r.crash_after = parse_size(o.crash_after);
  Node node(node_config(o, o.size));
  Group g = node.join(o.group);
  const auto out = cp::receive_tree(g, r);
  if (o.json) std::cout << out.summary.dump() << std::endl;
  if (!o.quiet || !out.ok) {
    std::ostringstream line;  // one write: receivers on one host share a terminal
    if (out.ok)
      line << "hmcast cp: member " << out.summary["member"] << " received "
                << out.summary["files_verified"] << " files ("
                << format_bytes(out.summary["bytes_verified"].get<double>()) << ") into " << o.into
                << ", every checksum verified\n";
    else
      line << "hmcast cp: member " << out.summary["member"] << ": " << out.summary.value("error", "failed") << "\n";
    std::cerr << line.str() << std::flush;
  }
  return out.ok ? 0 : 1;
}

void print_outcome(const cp::SendOutcome& out, std::ostream& err) {
  const auto& s = out.summary;
  err << "hmcast cp: " << format_bytes(s["bytes"].get<double>()) << " in " << s["files"] << " files and "
      << s["directories"] << " directories to " << s["receivers"] << " receivers in "
      << format_duration_us(s["seconds"].get<double>() * 1e6) << " ("
      << format_bytes(s["bytes_per_second"].get<double>()) << "/s); " << s["verified"] << " of "
      << s["receivers"] << " verified every file\n";
  for (const auto& skipped : s["skipped"]) err << "hmcast cp: skipped " << skipped.get<std::string>() << "\n";
  for (const auto& f : s["failures"])
    err << "hmcast cp: member " << f["member"] << " failed: " << f["error"].get<std::string>() << "\n";
  if (s.contains("stopped")) err << "hmcast cp: this member stopped: " << s["stopped"].get<std::string>() << "\n";
}

cp::SendOptions send_options(const CpOptions& o) {
  cp::SendOptions s;
  s.chunk_bytes = parse_size(o.chunk);
  if (s.chunk_bytes == 0) throw CLI::ValidationError("--chunk", "must be more than 0 bytes");
  s.in_flight_bytes = parse_size(o.in_flight);
  s.report_timeout = std::chrono::seconds(o.report_timeout_s);
  if (!o.crash_after.empty() && o.spawn == 0) s.crash_after = parse_size(o.crash_after);
  if (!o.quiet) {
    s.progress = stderr;
    s.progress_terminal = ::isatty(STDERR_FILENO) == 1;
  }
  return s;
}

int run_send(const CpOptions& o) {
  if (o.size < 2) throw CLI::ValidationError("--size", "name the group's members, the source included (at least 2)");
  const auto tree = cp::scan_sources(o.paths);  // before joining: a wrong path fails at once
  Node node(node_config(o, o.size));
  Group g = node.join(o.group);
  const auto out = cp::send_tree(g, tree, send_options(o));
  if (o.json) std::cout << out.summary.dump() << std::endl;
  if (!o.quiet || !out.all_verified) print_outcome(out, std::cerr);
  return out.all_verified ? 0 : 1;
}

/// One command on one host: this process runs the manager and the source, and
/// starts the receivers (each through --prefix, if given).
int run_spawn(const CpOptions& o) {
  if (o.into.empty()) throw CLI::ValidationError("--into", "--spawn needs --into DIR (with {i} for each receiver's own)");
  if (o.spawn > 1 && o.into.find("{i}") == std::string::npos)
    throw CLI::ValidationError("--into", "receivers on one host need a directory each: put {i} in --into");
  const auto tree = cp::scan_sources(o.paths);
  const auto [host, port] = socket::split_host_port(o.manager, "manager address");
  socket::ManagerServer manager(host, 0, socket::fresh_coordinator_config());
  CpOptions src = o;
  src.manager = host + ":" + std::to_string(manager.port());
  src.embed_manager = false;
  src.size = o.spawn + 1;
  const std::string exe = self_exe();
  std::vector<pid_t> kids;
  struct Reap {
    std::vector<pid_t>& kids;
    bool kill = true;
    ~Reap() {
      for (const pid_t p : kids) {
        if (kill) ::kill(p, SIGKILL);
        int st = 0;
        ::waitpid(p, &st, 0);
      }
    }
  } reap{kids};
  for (std::uint32_t i = 1; i <= o.spawn; ++i) {
    std::vector<std::string> argv;
    std::istringstream words(o.prefix);
    for (std::string w; words >> w;) argv.push_back(replace_index(w, i));
    argv.insert(argv.end(), {exe, "cp", "--receive", "--quiet", "--group", o.group, "--manager", src.manager, "--size",
                             std::to_string(src.size), "--into", replace_index(o.into, i), "--interface",
                             o.interface_address, "--queue", o.queue, "--join-timeout", std::to_string(o.join_timeout_s)});
    if (o.no_fsync) argv.push_back("--no-fsync");
    if (!o.crash_after.empty() && i == o.spawn) argv.insert(argv.end(), {"--crash-after", o.crash_after});
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
    if (rc != 0) throw std::runtime_error("cannot start receiver " + std::to_string(i) + " ('" + argv[0] + "'): " + std::strerror(rc));
    kids.push_back(pid);
  }
  Node node(node_config(src, src.size));
  Group g = node.join(o.group);
  const auto out = cp::send_tree(g, tree, send_options(o));
  // The receivers leave once the source is done; each one's exit status is its verdict too.
  reap.kill = false;
  std::vector<int> statuses;
  for (const pid_t p : kids) {
    int st = 0;
    while (::waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    statuses.push_back(st);
  }
  kids.clear();
  auto summary = out.summary;
  nlohmann::json exits = nlohmann::json::array();
  for (const int st : statuses)
    exits.push_back(WIFEXITED(st) ? nlohmann::json(WEXITSTATUS(st)) : nlohmann::json("signal " + std::to_string(WTERMSIG(st))));
  summary["receiver_exits"] = exits;
  if (o.json) std::cout << summary.dump() << std::endl;
  if (!o.quiet || !out.all_verified) print_outcome(out, std::cerr);
  return out.all_verified ? 0 : 1;
}

}  // namespace

void add_cp_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("cp", "Replicate files or directory trees to every member of a group");
  auto o = std::make_shared<CpOptions>();
  cmd->add_option("paths", o->paths, "Files and directories to send (the source)");
  cmd->add_flag("--receive", o->receive, "Receive (instead of send) into --into");
  cmd->add_option("--into", o->into, "Receiver: the directory to write into (with --spawn: '{i}' is the receiver's number)");
  cmd->add_option("--group", o->group, "Group name")->capture_default_str();
  cmd->add_option("--manager", o->manager, "HOST:PORT of the membership manager")->capture_default_str();
  cmd->add_flag("--embed-manager", o->embed_manager, "Source: run the manager in this process, on --manager");
  cmd->add_option("--size", o->size, "Members of the group, the source included (every one must run hmcast cp)");
  cmd->add_option("--interface", o->interface_address, "This member's local address")->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Source: file data per message")->capture_default_str();
  cmd->add_option("--in-flight", o->in_flight, "Source: bytes sent and not yet at every receiver")->capture_default_str();
  cmd->add_option("--queue", o->queue, "Receiver: bytes delivered and not yet written")->capture_default_str();
  cmd->add_flag("--no-fsync", o->no_fsync, "Receiver: rename files without flushing them to the disk first");
  cmd->add_flag("--json", o->json, "Print the outcome as one JSON line on stdout");
  cmd->add_flag("--quiet", o->quiet, "No progress or summary (failures are still printed)");
  cmd->add_option("--join-timeout", o->join_timeout_s, "Seconds to wait for the group to form")->capture_default_str();
  cmd->add_option("--report-timeout", o->report_timeout_s, "Source: seconds to wait for the receivers' verdicts after the last byte")
      ->capture_default_str();
  cmd->add_option("--spawn", o->spawn, "Source: start this many receivers (with --into) and run the manager here");
  cmd->add_option("--prefix", o->prefix, "With --spawn: words in front of each receiver's command ('{i}': its number)");
  cmd->add_option("--crash-after", o->crash_after, "Tests: SIGKILL this process after writing (receiver) or sending (source) this much; with --spawn, the last receiver");
  cmd->callback([o] {
    int rc = 0;
    if (o->receive) {
      if (!o->paths.empty()) throw CLI::ValidationError("paths", "a receiver takes no paths (only --into)");
      rc = run_receive(*o);
    } else {
      if (o->paths.empty()) throw CLI::ValidationError("paths", "name the files or directories to send");
      rc = o->spawn > 0 ? run_spawn(*o) : run_send(*o);
    }
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace hmcast::tools
