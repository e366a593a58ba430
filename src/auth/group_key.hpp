// The group key: a secret every member and the manager hold (issue 21). It never
// travels: joins prove they hold it and frames carry tags made with keys derived
// from it. Read from a key file (never from a command line, which `ps` shows).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "hmcast/config.hpp"

namespace hmcast::auth {

inline constexpr std::size_t kKeyBytes = 32;

/// The AEAD whose tags frames carry: part of the group's key, so every member agrees
/// (a key file names it; Config::key_cipher goes with Config::key). AES-256-GCM
/// costs a third of ChaCha20-Poly1305 per frame where the CPU has AES-NI and
/// carry-less multiply, which libsodium needs for it; ChaCha20-Poly1305 runs anywhere.
using Cipher = KeyCipher;

struct GroupKey {
  std::array<std::byte, kKeyBytes> bytes{};
  Cipher cipher = Cipher::aes256gcm;
  friend bool operator==(const GroupKey&, const GroupKey&) = default;
};

/// Whether this CPU can seal and open under `cipher`.
[[nodiscard]] bool cipher_available(Cipher cipher);
/// Throws hmcast::Error(invalid_config) saying what to do if it cannot.
void require_cipher(Cipher cipher);
/// The cipher a new key gets here: AES-256-GCM if this CPU has it, else ChaCha20-Poly1305.
[[nodiscard]] Cipher preferred_cipher();
[[nodiscard]] std::string cipher_name(Cipher cipher);
/// The cipher `name` names (as cipher_name spells it), or nullopt.
[[nodiscard]] std::optional<Cipher> parse_cipher(const std::string& name);

/// Initialises libsodium once (thread-safe; later calls return at once). Throws
/// hmcast::Error (transport_failed) if it cannot. Every src/auth entry point calls it
/// (seal and open through the ChannelKey they need, whose constructor did).
void ensure_sodium();

/// A fresh key from the operating system's random source (libsodium's randombytes),
/// under preferred_cipher().
[[nodiscard]] GroupKey generate_key();

/// The key as 64 lowercase hex digits, and back; parse_key throws hmcast::Error
/// (invalid_config) naming what is wrong, never echoing the text it was given.
/// parse_key reads the key file's text: the hex digits, then optionally the cipher's
/// name after white space (none: AES-256-GCM).
[[nodiscard]] std::string key_to_hex(const GroupKey& key);
[[nodiscard]] GroupKey parse_key(const std::string& text);

/// Reads a key file (see parse_key; whitespace around it is ignored). Refuses a
/// file that other users may read or write, as ssh does a private key: the error
/// says to `chmod 600` it.
[[nodiscard]] GroupKey read_key_file(const std::string& path);

/// The key of the file `key_file` names, else of the file the environment variable
/// HMCAST_KEY_FILE names, else none. Throws hmcast::Error(invalid_config) if the file
/// cannot be used or this CPU cannot run its cipher.
[[nodiscard]] std::optional<GroupKey> key_from_file(const std::string& key_file);

/// The group key a process uses: `key` (under `cipher`) if set, else key_from_file(key_file).
/// Throws hmcast::Error(invalid_config) if both are given, or as key_from_file.
[[nodiscard]] std::optional<GroupKey> resolve_key(const std::optional<std::array<std::byte, kKeyBytes>>& key,
                                                  Cipher cipher, const std::string& key_file);

/// Writes a new key file (hex digits and the cipher's name) readable by its owner
/// only; refuses to overwrite one.
void write_key_file(const std::string& path, const GroupKey& key);

}  // namespace hmcast::auth
