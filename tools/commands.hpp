// Subcommands of the `hmcast` tool; each registers its options and its action.
#pragma once

#include <CLI/CLI.hpp>

namespace hmcast::tools {

void add_sim_commands(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_member_command(CLI::App& app);
void add_manager_command(CLI::App& app);
void add_soak_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_cp_command(CLI::App& app);
void add_keygen_command(CLI::App& app);

}  // namespace hmcast::tools
