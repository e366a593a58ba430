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

/// A running hash over bytes (a content check, not a cryptographic hash). Four
/// independent lanes of eight bytes each take one xor and one multiply per word,
/// so the multiplies overlap instead of waiting on each other (the simulator
/// checks every byte every member delivers). Each step is a bijection of its lane
/// for a given word, so a changed word always changes its lane; the lanes are
/// mixed fully at the end.
inline std::uint64_t hash_bytes(std::uint64_t h, std::span<const std::byte> bytes) {
  constexpr std::uint64_t kOdd = 0x9e3779b97f4a7c15ULL;
  std::uint64_t a = h, b = h ^ 0x243f6a8885a308d3ULL, c = h ^ 0x13198a2e03707344ULL, d = h ^ 0xa4093822299f31d0ULL;
  std::size_t i = 0;
  for (; i + 32 <= bytes.size(); i += 32) {
    std::uint64_t w[4];
    std::memcpy(w, bytes.data() + i, 32);
    a = (a ^ w[0]) * kOdd;
    b = (b ^ w[1]) * kOdd;
    c = (c ^ w[2]) * kOdd;
    d = (d ^ w[3]) * kOdd;
  }
  h = mix_hash(mix_hash(mix_hash(mix_hash(h, a), b), c), d);
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
