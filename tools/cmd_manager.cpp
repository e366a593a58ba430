// `hmcast manager --listen HOST:PORT`: the standalone membership manager.
#include <csignal>
#include <iostream>
#include <thread>

#include "commands.hpp"
#include "transport/socket/manager_server.hpp"
#include "transport/socket/net_util.hpp"

namespace hmcast::tools {

namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int) { g_stop = 1; }
}  // namespace

void add_manager_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("manager", "Run the membership manager of socket-transport groups");
  auto listen = std::make_shared<std::string>("127.0.0.1:17700");
  auto seconds = std::make_shared<std::uint32_t>(0);
  cmd->add_option("--listen", *listen, "HOST:PORT to listen on")->capture_default_str();
  cmd->add_option("--exit-after", *seconds, "Stop after this many seconds (0: on SIGINT/SIGTERM)");
  cmd->callback([listen, seconds] {
    const auto [host, port] = socket::split_host_port(*listen, "listen address");
    socket::ManagerServer server(host, port, socket::fresh_coordinator_config(), [](const membership::IssuedView& v) {
      std::cout << "view " << v.view.id << " of '" << v.group << "': " << v.view.members.size() << " members";
      if (!v.left.empty()) std::cout << " (" << v.left.size() << " left)";
      std::cout << std::endl;
    });
    std::cout << "hmcast manager listening on " << host << ":" << server.port() << std::endl;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(*seconds);
    while (g_stop == 0 && (*seconds == 0 || std::chrono::steady_clock::now() < end))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  });
}

}  // namespace hmcast::tools
