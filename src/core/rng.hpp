// The one source of seeded randomness (the simulator, the fault layer, the
// coordinator's addresses, workloads). Our own generator and distributions (not
// <random>'s, whose distributions differ between standard libraries), so a seed
// names the same run everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace hmcast {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed ^ 0x9e3779b97f4a7c15ULL) {}
  /// splitmix64
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return p > 0 && uniform() < p; }
  /// Uniform in [0, n).
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }

 private:
  std::uint64_t state_;
};

/// 64-bit mixing of a value into a running hash (for event traces and content checks).
inline std::uint64_t mix_hash(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

/// A running hash over bytes, eight at a time (a content check, not a cryptographic hash).
inline std::uint64_t hash_bytes(std::uint64_t h, std::span<const std::byte> bytes) {
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, 8);
    h = mix_hash(h, w);
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return mix_hash(mix_hash(h, tail), bytes.size());
}

}  // namespace hmcast
