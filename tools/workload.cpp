#include "workload.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
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

/// Word `i` of a message body (bytes 8i..8i+7, little-endian): a function of the
/// stream and the position alone, so a check can read any word without the ones before.
std::uint64_t body_word(std::uint64_t stream, std::size_t i) { return mix_hash(stream, i); }

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

void fill_message(std::span<std::byte> out, std::uint64_t seed, MemberId sender, std::uint32_t index,
                  std::uint32_t attempt) {
  put_u32(out.data(), index);
  put_u32(out.data() + 4, attempt);
  const std::uint64_t stream = stream_seed(seed, sender, index, attempt);
  const auto body = out.subspan(kMessageHeader);
  for (std::size_t i = 0; i * 8 < body.size(); ++i) {
    std::uint64_t w = body_word(stream, i);
    if (std::endian::native == std::endian::little && 8 * i + 8 <= body.size()) {
      std::memcpy(body.data() + 8 * i, &w, 8);  // the same bytes as below, a word at a time
      continue;
    }
    for (std::size_t pos = 8 * i; pos < std::min(body.size(), 8 * i + 8); ++pos, w >>= 8)
      body[pos] = static_cast<std::byte>(w & 0xffU);
  }
}

std::optional<Checked> check_message(std::uint64_t seed, MemberId sender, std::span<const std::byte> bytes,
                                     Verify verify) {
  if (bytes.size() < kMessageHeader) return std::nullopt;
  Checked c;
  c.index = get_u32(bytes.data());
  c.attempt = get_u32(bytes.data() + 4);
  const std::uint64_t stream = stream_seed(seed, sender, c.index, c.attempt);
  const auto body = bytes.subspan(kMessageHeader);
  const std::size_t words = (body.size() + 7) / 8;
  // Sampled: about 4096 words spread over the body, and the last one.
  const std::size_t step = verify != Verify::full ? std::max<std::size_t>(1, words / 4096) : 1;
  bool ok = true;
  auto check_word = [&](std::size_t i) {
    std::uint64_t w = body_word(stream, i);
    if (std::endian::native == std::endian::little && 8 * i + 8 <= body.size()) {
      std::uint64_t got = 0;
      std::memcpy(&got, body.data() + 8 * i, 8);
      ok = ok && got == w;
      return;
    }
    for (std::size_t pos = 8 * i; pos < std::min(body.size(), 8 * i + 8); ++pos, w >>= 8)
      ok = ok && body[pos] == static_cast<std::byte>(w & 0xffU);
  };
  for (std::size_t i = 0; i < words; i += step) check_word(i);
  if (words > 0) check_word(words - 1);
  c.intact = ok;
  return c;
}

std::uint64_t message_digest(std::uint64_t seed, MemberId sender, std::uint32_t index, std::uint64_t size) {
  return mix_hash(stream_seed(seed, sender, index, 0), size);
}

}  // namespace hmcast::tools
