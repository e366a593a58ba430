// `hmcast keygen --out FILE`: a new group key in a file only its owner may read.
// Every member and manager of a group is given the same file (the key is never
// passed on a command line, which `ps` shows).
#include <iostream>
#include <memory>
#include <string>

#include "auth/group_key.hpp"
#include "commands.hpp"

namespace hmcast::tools {

void add_keygen_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("keygen", "Write a new group key to a file (mode 600; an existing file is kept)");
  auto out = std::make_shared<std::string>();
  cmd->add_option("--out", *out, "The key file to create")->required();
  cmd->callback([out] {
    auth::write_key_file(*out, auth::generate_key());
    std::cout << "wrote a group key to " << *out << " (copy it to every member and manager; keep it mode 600)\n";
  });
}

}  // namespace hmcast::tools
