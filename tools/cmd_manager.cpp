// `hmcast manager --listen HOST:PORT`: the standalone membership manager.
// `hmcast manager --zookeeper ENSEMBLE`: one of several; whoever holds the seat in
// ZooKeeper coordinates, the others stand by and take over when it dies
// (transport/zookeeper/zk_coordination.hpp).
#include <csignal>
#include <iostream>
#include <thread>

#include "auth/group_key.hpp"
#include "commands.hpp"
#include "hmcast/error.hpp"
#include "transport/socket/manager_server.hpp"
#include "transport/socket/net_util.hpp"
#ifdef HMCAST_HAVE_ZOOKEEPER
#include "transport/zookeeper/zk_coordination.hpp"
#endif

namespace hmcast::tools {

namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int) { g_stop = 1; }

struct ManagerOptions {
  std::string listen = "127.0.0.1:17700";
  std::uint32_t seconds = 0;
  std::string zookeeper;
  std::string root = "/hmcast";
  std::uint32_t session_ms = 1000;
  std::uint32_t rejoin_ms = 3000;
  std::string key_file;  // members must prove they hold this group key
};

/// The key of --key-file, else of $HMCAST_KEY_FILE, else none (anyone may join).
std::optional<auth::GroupKey> key_of(const ManagerOptions& o) { return auth::key_from_file(o.key_file); }

void print_view(const membership::IssuedView& v) {
  std::cout << "view " << v.view.id << " of '" << v.group << "': " << v.view.members.size() << " members";
  if (!v.left.empty()) std::cout << " (" << v.left.size() << " left)";
  std::cout << std::endl;
}

/// Serves until a signal, the time limit, or (`failed`) the server stopping on its own.
void serve_until_stopped(const ManagerOptions& o, const std::function<std::string()>& failed) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(o.seconds);
  while (g_stop == 0 && (o.seconds == 0 || std::chrono::steady_clock::now() < end)) {
    if (const auto why = failed(); !why.empty()) throw Error(ErrorCode::manager_lost, why + "; restart this manager");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

#ifdef HMCAST_HAVE_ZOOKEEPER
void run_seated(const ManagerOptions& o, const std::string& host, std::uint16_t port) {
  zk::StandingManager::Options so;
  so.ensemble = o.zookeeper;
  so.root = o.root;
  so.host = host;
  so.port = port;
  so.session_timeout = std::chrono::milliseconds(o.session_ms);
  so.rejoin_window = std::chrono::milliseconds(o.rejoin_ms);
  so.on_view = print_view;
  so.key = key_of(o);
  so.on_event = [](const std::string& what) { std::cout << "hmcast manager " << what << std::endl; };
  zk::StandingManager standing(so);
  std::cout << "hmcast manager standing by for the coordinator's seat at " << o.zookeeper << " (" << o.root << ")"
            << std::endl;
  serve_until_stopped(o, [&] { return standing.failure(); });
}
#endif

}  // namespace

void add_manager_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("manager", "Run the membership manager of socket-transport groups");
  auto o = std::make_shared<ManagerOptions>();
  cmd->add_option("--listen", o->listen, "HOST:PORT to listen on (port 0: any free port)")->capture_default_str();
  cmd->add_option("--exit-after", o->seconds, "Stop after this many seconds (0: on SIGINT/SIGTERM)");
  cmd->add_option("--zookeeper", o->zookeeper,
                  "ZooKeeper ensemble HOST:PORT,...: stand for the coordinator's seat there, and take over the "
                  "groups a dead coordinator recorded");
  cmd->add_option("--zk-root", o->root, "Where in ZooKeeper the seat and the group records are")->capture_default_str();
  cmd->add_option("--zk-session-ms", o->session_ms,
                  "ZooKeeper session timeout: how soon a dead coordinator's seat is free")
      ->capture_default_str();
  cmd->add_option("--rejoin-ms", o->rejoin_ms, "After taking over: how long members have to rejoin")
      ->capture_default_str();
  cmd->add_option("--key-file", o->key_file,
                  "The group key (`hmcast keygen`; mode 600): only members that prove they hold it are heard. "
                  "Default: $HMCAST_KEY_FILE, or anyone may join");
  cmd->callback([o] {
    const auto [host, port] = socket::split_host_port(o->listen, "listen address");
    if (!o->zookeeper.empty()) {
#ifdef HMCAST_HAVE_ZOOKEEPER
      run_seated(*o, host, port);
      return;
#else
      throw Error(ErrorCode::invalid_config, "this hmcast was built without ZooKeeper (libzookeeper-mt-dev)");
#endif
    }
    socket::ManagerServer server(host, port, socket::fresh_coordinator_config(), print_view, socket::Succession{},
                                 key_of(*o));
    std::cout << "hmcast manager listening on " << host << ":" << server.port() << std::endl;
    serve_until_stopped(*o, [&] { return server.failure(); });
  });
}

}  // namespace hmcast::tools
