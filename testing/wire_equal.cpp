#include "wire_equal.hpp"

#include <algorithm>

#include "core/overloaded.hpp"

namespace hmcast::testing {

bool same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

bool data_only_agrees(std::span<const std::byte> bytes) {
  const auto full = wire::decode(bytes);
  wire::Header h;
  wire::Data d;
  const auto fast = wire::decode_data_only(bytes, h, d);
  const bool is_data = bytes.size() >= wire::kHeaderSize && wire::peek_type(bytes) == wire::Type::data;
  if (!is_data) return !fast.has_value();
  if (!fast || *fast != full.error) return false;
  if (full.ok() && !(h == full.packet.header && same_body(wire::Body{d}, full.packet.body))) return false;
  // Its head alone, the payload's size given (a transport that places the payload):
  // the same error, and for a good packet the same header and fields.
  if (bytes.size() < wire::kDataOverhead) return true;
  wire::Header hh;
  wire::Data hd;
  const auto head = wire::decode_data_head(bytes.first(wire::kDataOverhead), bytes.size() - wire::kDataOverhead, hh, hd);
  if (!head || *head != full.error || !hd.payload.empty()) return false;
  if (!full.ok()) return true;
  hd.payload = std::get<wire::Data>(full.packet.body).payload;
  return hh == full.packet.header && same_body(wire::Body{hd}, full.packet.body);
}

bool same_body(const wire::Body& a, const wire::Body& b) {
  if (a.index() != b.index()) return false;
  namespace w = wire;
  auto same_data = [](const w::Data& x, const w::Data& y) {
    return x.sender == y.sender && x.seq == y.seq && x.stable == y.stable && x.msg_len == y.msg_len &&
           x.offset == y.offset && x.frag_index == y.frag_index && x.frag_count == y.frag_count &&
           same_bytes(x.payload, y.payload);
  };
  return std::visit(
      Overloaded{
          [&](const w::Data& x) { return same_data(x, std::get<w::Data>(b)); },
          [&](const w::FragmentRepair& x) { return same_data(x.fragment, std::get<w::FragmentRepair>(b).fragment); },
          [&](const w::Nack& x) { return x == std::get<w::Nack>(b); },
          [&](const w::Repair& x) {
            const auto& y = std::get<w::Repair>(b);
            return x.sender == y.sender && x.seq == y.seq && x.stable == y.stable && same_bytes(x.payload, y.payload);
          },
          [&](const w::Ack& x) { return x.entries == std::get<w::Ack>(b).entries; },
          [&](const w::Stable& x) {
            const auto& y = std::get<w::Stable>(b);
            return x.sender == y.sender && x.stable == y.stable && x.highest == y.highest;
          },
          [&](const w::AckQuery& x) {
            const auto& y = std::get<w::AckQuery>(b);
            return x.sender == y.sender && x.seq == y.seq;
          },
          [&](const w::Announce& x) {
            const auto& y = std::get<w::Announce>(b);
            return x.sender == y.sender && x.seq == y.seq && x.size == y.size && x.block_size == y.block_size &&
                   x.algorithm == y.algorithm;
          },
          [&](const w::Ready& x) {
            const auto& y = std::get<w::Ready>(b);
            return x.sender == y.sender && x.seq == y.seq && x.credit == y.credit;
          },
          [&](const w::Block& x) {
            const auto& y = std::get<w::Block>(b);
            return x.sender == y.sender && x.seq == y.seq && x.index == y.index && x.offset == y.offset &&
                   x.length == y.length && same_bytes(x.payload, y.payload);
          },
          [&](const w::LargeAck& x) {
            const auto& y = std::get<w::LargeAck>(b);
            return x.sender == y.sender && x.seq == y.seq;
          },
          [&](const w::LargeCommit& x) {
            const auto& y = std::get<w::LargeCommit>(b);
            return x.sender == y.sender && x.seq == y.seq;
          },
          [&](const w::Ping&) { return true; },
          [&](const w::McastProbe& x) { return x.nonce == std::get<w::McastProbe>(b).nonce; },
          [&](const w::McastConfirm& x) { return x.nonce == std::get<w::McastConfirm>(b).nonce; },
          [&](const w::Batch& x) {
            const auto& y = std::get<w::Batch>(b);
            if (x.items.size() != y.items.size()) return false;
            for (std::size_t i = 0; i < x.items.size(); ++i)
              if (!std::equal(x.items[i].begin(), x.items[i].end(), y.items[i].begin(), y.items[i].end())) return false;
            return true;
          },
      },
      a);
}

}  // namespace hmcast::testing
