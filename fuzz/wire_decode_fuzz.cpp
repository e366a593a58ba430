// libFuzzer target: wire::decode on arbitrary bytes. It must never crash or read out of
// bounds (built with ASan/UBSan), and whatever it accepts must re-encode to exactly the
// input and decode again to the same fields; wire::decode_data_only, and
// wire::decode_data_head of an input's head given the rest's size, must agree with it
// on every input. Any mismatch aborts with a message.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/wire.hpp"
#include "wire_equal.hpp"

namespace {

namespace w = hmcast::wire;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "wire_decode_fuzz: %s\n", what);
  std::abort();
}

using hmcast::testing::same_body;
using hmcast::testing::same_bytes;

// Spans in a decoded body point into the input (zero-copy, in bounds).
bool payload_inside(const w::Body& body, std::span<const std::byte> in) {
  std::span<const std::byte> p;
  if (const auto* d = std::get_if<w::Data>(&body)) p = d->payload;
  else if (const auto* f = std::get_if<w::FragmentRepair>(&body)) p = f->fragment.payload;
  else if (const auto* r = std::get_if<w::Repair>(&body)) p = r->payload;
  if (p.empty()) return true;
  return p.data() >= in.data() && p.data() + p.size() <= in.data() + in.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An exact-size copy, so ASan sees any read past the end (the fuzzer's buffer is exact too).
  const std::vector<std::byte> in(std::as_bytes(std::span<const std::uint8_t>(data, size)).begin(),
                                  std::as_bytes(std::span<const std::uint8_t>(data, size)).end());
  const auto res = w::decode(in);
  // The Data decoder without the variant must say the same of the same bytes.
  if (!hmcast::testing::data_only_agrees(in)) fail("decode_data_only and decode disagree");
  if (!res.ok()) {
    if (w::to_string(res.error) == "unknown") fail("decode returned an unnamed error");
    return 0;
  }
  const auto& p = res.packet;
  if (!payload_inside(p.body, in)) fail("payload span outside the input");
  const std::vector<std::byte> again = w::encode(p.header, p.body);
  if (!same_bytes(again, in)) fail("re-encoding an accepted packet does not reproduce the input");
  // Encoded in place (as the Emitter writes a batch's items), and sized beforehand: the same.
  if (w::encoded_size(p.header, p.body) != in.size()) fail("encoded_size differs from the encoding");
  if (w::type_of(p.body) != w::peek_type(in)) fail("type_of differs from the encoded type");
  std::vector<std::byte> in_place(in.size());
  w::encode_to(p.header, p.body, in_place);
  if (!same_bytes(in_place, in)) fail("encode_to differs from encode");
  if (const auto* b = std::get_if<w::Batch>(&p.body)) {
    // A batch's head, written as the Emitter writes it, is the input's.
    std::vector<std::byte> head(w::kBatchOverhead);
    w::encode_batch_head(p.header, b->items.size(), head);
    if (!std::equal(head.begin(), head.end(), in.begin())) fail("encode_batch_head differs from the batch's head");
  }
  const auto res2 = w::decode(again);
  if (!res2.ok()) fail("re-encoded packet does not decode");
  if (!(res2.packet.header == p.header)) fail("header differs after re-encoding");
  if (!same_body(res2.packet.body, p.body)) fail("body differs after re-encoding");
  return 0;
}
