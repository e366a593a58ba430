// `hmcast keygen --out FILE`: a new group key in a file only its owner may read.
// Every member and manager of a group is given the same file (the key is never
// passed on a command line, which `ps` shows).
#include <iostream>
#include <memory>
#include <string>

#include "auth/group_key.hpp"
#include "commands.hpp"
#include "hmcast/error.hpp"

namespace hmcast::tools {

void add_keygen_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("keygen", "Write a new group key to a file (mode 600; an existing file is kept)");
  auto out = std::make_shared<std::string>();
  auto cipher = std::make_shared<std::string>();
  cmd->add_option("--out", *out, "The key file to create")->required();
  cmd->add_option("--cipher", *cipher,
                  "aes256gcm or chacha20poly1305 (default: aes256gcm if this CPU has AES-NI); every member must "
                  "be able to run it");
  cmd->callback([out, cipher] {
    auth::GroupKey key = auth::generate_key();
    if (!cipher->empty()) {
      const auto c = auth::parse_cipher(*cipher);
      if (!c) throw Error(ErrorCode::invalid_config, "--cipher: aes256gcm or chacha20poly1305, not '" + *cipher + "'");
      key.cipher = *c;
    }
    auth::write_key_file(*out, key);
    std::cout << "wrote a group key (" << auth::cipher_name(key.cipher) << ") to " << *out
              << " (copy it to every member and manager; keep it mode 600)\n";
  });
}

}  // namespace hmcast::tools
