// libFuzzer target: the TCP frame reader and hello decoder of the socket transport.
// Any byte stream, fed in arbitrary pieces, must never crash or read out of bounds;
// frames must come out identical however the stream is split, and none over the limit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
  std::vector<std::vector<std::byte>> whole, pieces;
  const bool ok_whole = run(stream.size() == 0 ? 1 : stream.size(), whole);
  const bool ok_pieces = run(piece, pieces);
  if (ok_whole != ok_pieces || whole != pieces) std::abort();  // splitting must not matter
  return 0;
}
