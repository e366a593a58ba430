#include "workload.hpp"

#include <cctype>
#include <stdexcept>

#include "core/rng.hpp"

namespace hmcast::tools {

namespace {

std::uint64_t stream_seed(std::uint64_t seed, MemberId sender, std::uint32_t index, std::uint32_t attempt) {
  return mix_hash(mix_hash(mix_hash(seed, sender), index), attempt);
}

void put_u32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xffU);
}
std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

/// Fills `out` with the pseudo-random body of a message, 8 bytes per step.
template <class Fn>
void body_words(std::uint64_t s, std::size_t n, Fn&& fn) {
  Rng rng(s);
  for (std::size_t pos = 0; pos < n; pos += 8) fn(pos, rng.next());
}

}  // namespace

SizeMix SizeMix::parse(const std::string& spec) {
  SizeMix mix;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const auto comma = spec.find(',', start);
    const std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto colon = item.find(':');
    const std::uint64_t size = parse_size(item.substr(0, colon));
    std::uint32_t weight = 1;
    if (colon != std::string::npos) {
      const std::string w = item.substr(colon + 1);
      if (w.empty() || w.size() > 6 || !std::all_of(w.begin(), w.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }))
        throw std::invalid_argument("weight '" + w + "' in '" + item + "' is not a whole number");
      weight = static_cast<std::uint32_t>(std::stoul(w));
    }
    if (size < kMessageHeader)
      throw std::invalid_argument("size " + std::to_string(size) + " is under " + std::to_string(kMessageHeader) +
                                  " bytes: each message carries its index and attempt");
    if (weight > 0) mix.sizes.emplace_back(size, weight);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (mix.sizes.empty()) throw std::invalid_argument("the size list '" + spec + "' has no size with a weight above 0");
  return mix;
}

std::string SizeMix::to_string() const {
  std::string s;
  for (const auto& [size, weight] : sizes) {
    if (!s.empty()) s += ",";
    s += format_size(size);
    if (weight != 1) s += ":" + std::to_string(weight);
  }
  return s;
}

std::uint64_t SizeMix::size_of(std::uint64_t seed, MemberId sender, std::uint32_t index) const {
  std::uint64_t total = 0;
  for (const auto& [size, weight] : sizes) total += weight;
  std::uint64_t pick = mix_hash(stream_seed(seed, sender, index, 0xffffffffU), 17) % total;
  for (const auto& [size, weight] : sizes) {
    if (pick < weight) return size;
    pick -= weight;
  }
  return sizes.back().first;
}

std::vector<std::byte> make_message(std::uint64_t seed, MemberId sender, std::uint32_t index, std::uint32_t attempt,
                                    std::uint64_t size) {
  std::vector<std::byte> m(size);
  put_u32(m.data(), index);
  put_u32(m.data() + 4, attempt);
  body_words(stream_seed(seed, sender, index, attempt), size - kMessageHeader, [&](std::size_t pos, std::uint64_t w) {
    for (std::size_t k = 0; k < 8 && pos + k < size - kMessageHeader; ++k)
      m[kMessageHeader + pos + k] = static_cast<std::byte>((w >> (8 * k)) & 0xffU);
  });
  return m;
}

std::optional<Checked> check_message(std::uint64_t seed, MemberId sender, std::span<const std::byte> bytes) {
  if (bytes.size() < kMessageHeader) return std::nullopt;
  Checked c;
  c.index = get_u32(bytes.data());
  c.attempt = get_u32(bytes.data() + 4);
  const std::size_t n = bytes.size() - kMessageHeader;
  bool ok = true;
  body_words(stream_seed(seed, sender, c.index, c.attempt), n, [&](std::size_t pos, std::uint64_t w) {
    for (std::size_t k = 0; k < 8 && pos + k < n; ++k)
      ok = ok && bytes[kMessageHeader + pos + k] == static_cast<std::byte>((w >> (8 * k)) & 0xffU);
  });
  c.intact = ok;
  return c;
}

std::uint64_t message_digest(std::uint64_t seed, MemberId sender, std::uint32_t index, std::uint64_t size) {
  return mix_hash(stream_seed(seed, sender, index, 0), size);
}

}  // namespace hmcast::tools
