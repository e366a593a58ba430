#include "workload.hpp"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "core/byte_io.hpp"
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
/// One multiply and add: the stream (a hash of seed, sender, index and attempt) tells
/// messages apart, the odd step tells every position of one body apart (no two of its
/// words are equal), and the check costs what Open MPI's baseline spends on its own
/// buffers (a multiply-add per sampled byte), where a hash per word had cost a receiver
/// several microseconds per 64 KiB inside the timed loop that the baseline checks outside.
std::uint64_t body_word(std::uint64_t stream, std::size_t i) { return stream + i * 0x9e3779b97f4a7c15ULL; }

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
  if (sizes.size() == 1) return sizes.front().first;  // nothing to pick (and no hash per message)
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
  const std::size_t whole = body.size() / 8;
  for (std::size_t i = 0; i < whole; ++i) wire::store_le(body.data() + 8 * i, body_word(stream, i));
  std::uint64_t w = body_word(stream, whole);  // the tail: the first bytes of the next word
  for (std::size_t pos = 8 * whole; pos < body.size(); ++pos, w >>= 8) body[pos] = static_cast<std::byte>(w & 0xffU);
}

std::optional<Checked> check_message(std::uint64_t seed, MemberId sender, std::span<const std::byte> bytes,
                                     Verify verify) {
  if (bytes.size() < kMessageHeader) return std::nullopt;
  Checked c;
  c.index = get_u32(bytes.data());
  c.attempt = get_u32(bytes.data() + 4);
  const auto body = bytes.subspan(kMessageHeader);
  if (body.empty()) {  // only the header (Verify::stamp): nothing to compare
    c.intact = true;
    return c;
  }
  const std::uint64_t stream = stream_seed(seed, sender, c.index, c.attempt);
  const std::size_t whole = body.size() / 8;
  // Sampled: about 512 words (4 KiB) spread over the body, the last whole one and the
  // tail, as Open MPI's baseline checks up to 4096 bytes of its buffers: every word of
  // a small message, enough of a large one to catch a stale or misplaced block. More
  // would be the harness's time, not the library's: a receiver's progress thread
  // checks inside its delivery callback, and the next message waits on it (the
  // baseline checks after its barrier, outside what it times). Differences are
  // or-ed together rather than tested one by one: no branch per word.
  const std::size_t step = verify != Verify::full ? std::max<std::size_t>(1, whole / 512) : 1;
  std::uint64_t diff = 0;
  const auto differs = [&](std::size_t i) {
    return wire::load_le<std::uint64_t>(body.data() + 8 * i) ^ body_word(stream, i);
  };
  for (std::size_t i = 0; i < whole; i += step) diff |= differs(i);
  if (whole > 0) diff |= differs(whole - 1);
  std::uint64_t w = body_word(stream, whole);
  for (std::size_t pos = 8 * whole; pos < body.size(); ++pos, w >>= 8)
    diff |= std::to_integer<std::uint64_t>(body[pos]) ^ (w & 0xffU);
  c.intact = diff == 0;
  return c;
}

std::uint64_t message_digest(std::uint64_t seed, MemberId sender, std::uint32_t index, std::uint64_t size) {
  return mix_hash(stream_seed(seed, sender, index, 0), size);
}

}  // namespace hmcast::tools
