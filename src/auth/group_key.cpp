#include "auth/group_key.hpp"

#include <cstdlib>

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "hmcast/error.hpp"

namespace hmcast::auth {
namespace {

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorCode::invalid_config, what); }

}  // namespace

void ensure_sodium() {
  // sodium_init() is idempotent and thread-safe; it picks the fastest implementations for this CPU.
  static const bool ok = sodium_init() >= 0;
  if (!ok) throw Error(ErrorCode::transport_failed, "libsodium failed to initialise (sodium_init)");
}

GroupKey generate_key() {
  ensure_sodium();
  GroupKey k;
  randombytes_buf(k.bytes.data(), k.bytes.size());
  k.cipher = preferred_cipher();
  return k;
}

bool cipher_available(Cipher cipher) {
  ensure_sodium();
  switch (cipher) {
    case Cipher::aes256gcm:
      return crypto_aead_aes256gcm_is_available() == 1;
    case Cipher::chacha20poly1305:
      return true;
  }
  return false;
}

void require_cipher(Cipher cipher) {
  if (cipher != Cipher::aes256gcm && cipher != Cipher::chacha20poly1305)
    bad("unknown group key cipher " + std::to_string(static_cast<int>(cipher)));
  if (!cipher_available(cipher))
    bad("the group key's cipher is AES-256-GCM, and this CPU lacks the AES-NI and carry-less multiply "
        "instructions libsodium needs for it: give every member a key under ChaCha20-Poly1305 "
        "(`hmcast keygen --cipher chacha20poly1305`, or Config::key_cipher)");
}

Cipher preferred_cipher() { return cipher_available(Cipher::aes256gcm) ? Cipher::aes256gcm : Cipher::chacha20poly1305; }

std::string cipher_name(Cipher cipher) {
  switch (cipher) {
    case Cipher::aes256gcm:
      return "aes256gcm";
    case Cipher::chacha20poly1305:
      return "chacha20poly1305";
  }
  return "unknown";
}

std::optional<Cipher> parse_cipher(const std::string& name) {
  for (const Cipher c : {Cipher::aes256gcm, Cipher::chacha20poly1305})
    if (name == cipher_name(c)) return c;
  return std::nullopt;
}

std::string key_to_hex(const GroupKey& key) {
  std::array<char, 2 * kKeyBytes + 1> out{};
  sodium_bin2hex(out.data(), out.size(), reinterpret_cast<const unsigned char*>(key.bytes.data()), key.bytes.size());
  return std::string(out.data(), 2 * kKeyBytes);
}

GroupKey parse_key(const std::string& text) {
  std::istringstream words(text);
  std::string hex;
  std::string cipher;
  std::string more;
  words >> hex >> cipher >> more;
  if (!more.empty()) bad("a group key is its hex digits and at most a cipher's name; this one has more words");
  GroupKey k;
  if (!cipher.empty()) {
    const auto c = parse_cipher(cipher);
    if (!c) bad("unknown cipher '" + cipher + "' after the key (aes256gcm or chacha20poly1305)");
    k.cipher = *c;
  }
  if (hex.size() != 2 * kKeyBytes)
    bad("a group key is " + std::to_string(2 * kKeyBytes) + " hex digits; this one has " +
        std::to_string(hex.size()) + " characters (make one with `hmcast keygen --out FILE`)");
  std::size_t got = 0;
  const char* end = nullptr;
  if (sodium_hex2bin(reinterpret_cast<unsigned char*>(k.bytes.data()), k.bytes.size(), hex.data(), hex.size(),
                     nullptr, &got, &end) != 0 ||
      got != kKeyBytes || end != hex.data() + hex.size())
    bad("a group key is hex digits only (make one with `hmcast keygen --out FILE`)");
  return k;
}

GroupKey read_key_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    bad("cannot read the key file " + path + ": " + std::strerror(errno));
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    bad("the key file " + path + " may be read or written by other users: chmod 600 it");
  std::ifstream in(path);
  if (!in) bad("cannot open the key file " + path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_key(text.str());
  } catch (const Error& e) {
    bad("the key file " + path + ": " + e.what());
  }
}

void write_key_file(const std::string& path, const GroupKey& key) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) bad("cannot create the key file " + path + ": " + std::strerror(errno) + " (it must not exist yet)");
  const std::string text = key_to_hex(key) + " " + cipher_name(key.cipher) + "\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    ::unlink(path.c_str());
    bad("cannot write the key file " + path + ": " + std::strerror(err));
  }
}

std::optional<GroupKey> resolve_key(const std::optional<std::array<std::byte, kKeyBytes>>& key, Cipher cipher,
                                    const std::string& key_file) {
  if (key && !key_file.empty()) bad("a group key and a key file are both set: set one");
  if (key) {
    require_cipher(cipher);
    return GroupKey{*key, cipher};
  }
  return key_from_file(key_file);
}

std::optional<GroupKey> key_from_file(const std::string& key_file) {
  std::string file = key_file;
  if (file.empty()) {
    const char* env = std::getenv("HMCAST_KEY_FILE");
    if (env == nullptr || *env == '\0') return std::nullopt;
    file = env;
  }
  GroupKey k = read_key_file(file);
  require_cipher(k.cipher);
  return k;
}

}  // namespace hmcast::auth
