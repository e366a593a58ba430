// libFuzzer target: the TCP frame reader and hello decoder of the socket transport.
// Any byte stream, fed in arbitrary pieces, must never crash or read out of bounds;
// frames must come out identical however the stream is split, and none over the limit;
// also when tails are placed elsewhere and the reader waits at heads (as the socket
// transport reads blocks), once each placed tail is put back behind its head.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "transport/socket/framing.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::size_t limit = 1U + data[0] * 97U;  // small limits reach the over-limit path
  const std::size_t piece = 1U + data[1] % 13U;
  const auto stream = std::as_bytes(std::span(data + 2, size - 2));

  auto run = [&](std::size_t step, std::vector<std::vector<std::byte>>& frames) {
    hmcast::socket::FrameReader reader(limit);
    bool ok = true;
    for (std::size_t i = 0; i < stream.size() && ok; i += step) {
      ok = reader.feed(stream.subspan(i, std::min(step, stream.size() - i)), [&](std::vector<std::byte>&& f) {
        if (f.size() > limit) std::abort();
        (void)hmcast::socket::decode_hello(f);
        frames.push_back(std::move(f));
        return true;
      });
    }
    return ok;
  };
  // As Endpoint::read_connection: no more than until_head() through feed(), placed
  // tails read straight into their place, nothing read while the reader waits.
  auto run_placed = [&](std::vector<std::vector<std::byte>>& frames) {
    constexpr std::size_t kHead = 8;
    hmcast::socket::FrameReader reader(limit);
    std::shared_ptr<std::vector<std::byte>> dest;
    std::uint32_t asks = 0;
    reader.set_placer(
        kHead,
        [&](std::span<const std::byte> head, std::size_t body) -> std::optional<hmcast::socket::Placement> {
          if (head.size() != kHead || body <= kHead) std::abort();
          if (++asks % 3 != 0) return std::nullopt;
          dest = std::make_shared<std::vector<std::byte>>(body - kHead);
          return hmcast::socket::Placement{std::span(*dest), dest};
        },
        [&] { return (asks + piece) % 2 == 1; });
    const auto on_frame = [&](std::vector<std::byte>&& f) {
      if (reader.placed()) f.insert(f.end(), dest->begin(), dest->end());
      if (f.size() > limit) std::abort();
      frames.push_back(std::move(f));
      return true;
    };
    bool ok = true;
    for (std::size_t i = 0; i < stream.size() && ok;) {
      if (reader.waiting()) {
        reader.ask_again();
        continue;
      }
      const auto rest = stream.subspan(i);
      if (const auto into = reader.direct(); !into.empty()) {
        const std::size_t n = std::min({into.size(), rest.size(), piece});
        std::copy_n(rest.begin(), n, into.begin());
        ok = reader.direct_filled(n, on_frame);
        i += n;
        continue;
      }
      const std::size_t n = std::min(reader.until_head(), rest.size());
      if (n == 0) std::abort();  // a placer is set and no tail is being placed
      ok = reader.feed(rest.first(n), on_frame);
      i += n;
    }
    return ok;
  };
  std::vector<std::vector<std::byte>> whole, pieces, placed;
  const bool ok_whole = run(stream.size() == 0 ? 1 : stream.size(), whole);
  const bool ok_pieces = run(piece, pieces);
  if (ok_whole != ok_pieces || whole != pieces) std::abort();  // splitting must not matter
  const bool ok_placed = run_placed(placed);
  if (ok_whole != ok_placed || whole != placed) std::abort();  // nor placing and waiting
  return 0;
}
