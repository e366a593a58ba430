// The group key: a secret every member and the manager hold (issue 21). It never
// travels: joins prove they hold it and frames carry tags made with keys derived
// from it. Read from a key file (never from a command line, which `ps` shows).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>

namespace hmcast::auth {

inline constexpr std::size_t kKeyBytes = 32;

struct GroupKey {
  std::array<std::byte, kKeyBytes> bytes{};
  friend bool operator==(const GroupKey&, const GroupKey&) = default;
};

/// Initialises libsodium once (thread-safe; later calls return at once). Throws
/// hmcast::Error (transport_failed) if it cannot. Every src/auth entry point calls it.
void ensure_sodium();

/// A fresh key from the operating system's random source (libsodium's randombytes).
[[nodiscard]] GroupKey generate_key();

/// The key as 64 lowercase hex digits, and back; parse_key throws hmcast::Error
/// (invalid_config) naming what is wrong, never echoing the text it was given.
[[nodiscard]] std::string key_to_hex(const GroupKey& key);
[[nodiscard]] GroupKey parse_key(const std::string& text);

/// Reads a key file (64 hex digits; whitespace around them is ignored). Refuses a
/// file that other users may read or write, as ssh does a private key: the error
/// says to `chmod 600` it.
[[nodiscard]] GroupKey read_key_file(const std::string& path);

/// The group key a process uses: `key` if set, else the file `key_file` names, else
/// the file the environment variable HMCAST_KEY_FILE names, else none. Throws
/// hmcast::Error(invalid_config) if both are given or the file cannot be used.
[[nodiscard]] std::optional<GroupKey> resolve_key(const std::optional<std::array<std::byte, kKeyBytes>>& key,
                                                  const std::string& key_file);

/// Writes a new key file readable by its owner only; refuses to overwrite one.
void write_key_file(const std::string& path, const GroupKey& key);

}  // namespace hmcast::auth
