#include "membership/group_record.hpp"

#include "core/byte_io.hpp"
#include "membership/control_codec.hpp"

namespace hmcast::membership {

namespace {
// "HMR" (hmcast membership record), then the version.
constexpr std::byte kRecordMagic0{'H'};
constexpr std::byte kRecordMagic1{'M'};
constexpr std::byte kRecordMagic2{'R'};
}  // namespace

std::vector<std::byte> encode(const GroupRecord& r) {
  std::vector<std::byte> out{kRecordMagic0, kRecordMagic1, kRecordMagic2, std::byte{kGroupRecordVersion}};
  wire::Writer w(out);
  put_control_string(w, r.name);
  w.u64(r.id);
  w.u32(r.expected);
  w.u32(r.multicast_address);
  w.u16(r.multicast_port);
  w.u32(r.next_id);
  encode_view(r.view, out);
  return out;
}

std::optional<GroupRecord> decode_group_record(std::span<const std::byte> bytes) {
  if (bytes.size() < 4 || bytes[0] != kRecordMagic0 || bytes[1] != kRecordMagic1 || bytes[2] != kRecordMagic2 ||
      bytes[3] != std::byte{kGroupRecordVersion})
    return std::nullopt;
  wire::Reader r(bytes.subspan(4));
  GroupRecord g;
  g.name = get_control_string(r);
  g.id = r.u64();
  g.expected = r.u32();
  g.multicast_address = r.u32();
  g.multicast_port = r.u16();
  g.next_id = r.u32();
  auto v = decode_view(r);
  if (!v || !r.ok() || r.remaining() != 0) return std::nullopt;
  g.view = std::move(*v);
  // Our own invariants: a named group of at least one expected member, and ids
  // handed out only below next_id.
  if (g.name.empty() || g.expected == 0 || g.next_id == 0) return std::nullopt;
  for (const auto& a : g.view.members)
    if (a.id >= g.next_id) return std::nullopt;
  return g;
}

}  // namespace hmcast::membership
