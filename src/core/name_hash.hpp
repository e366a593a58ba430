// The 64-bit hash of a group name: FNV-1a, so it is the same in every process and build.
#pragma once

#include <cstdint>
#include <string_view>

namespace hmcast {

inline std::uint64_t name_hash(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

}  // namespace hmcast
