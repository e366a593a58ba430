// hmcast: demo, simulation and benchmark front end.
#include <iostream>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"hmcast: reliable broadcast for RDMA clusters (demo, sim, bench)"};
  app.require_subcommand(1);
  hmcast::tools::add_demo_command(app);
  hmcast::tools::add_sim_commands(app);
  hmcast::tools::add_member_command(app);
  hmcast::tools::add_manager_command(app);
  hmcast::tools::add_soak_command(app);
  hmcast::tools::add_bench_command(app);
  hmcast::tools::add_cp_command(app);
  hmcast::tools::add_keygen_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "hmcast: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
