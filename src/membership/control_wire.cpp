#include "membership/control_wire.hpp"

#include <algorithm>

#include "core/byte_io.hpp"
#include "membership/control_codec.hpp"

namespace hmcast::membership {

namespace {

// "HMC" (hmcast membership control), the version, then a type byte.
constexpr std::byte kMagic0{'H'};
constexpr std::byte kMagic1{'M'};
constexpr std::byte kMagic2{'C'};
// ViewPush flags.
constexpr std::uint8_t kEndsFlush = 1;
constexpr std::uint8_t kEmulated = 2;

void put_string(wire::Writer& w, const std::string& s) {
  const auto n = std::min(s.size(), kMaxControlString);  // encoders of ours never pass longer
  w.u8(static_cast<std::uint8_t>(n));
  w.bytes(std::as_bytes(std::span(s.data(), n)));
}

std::string get_string(wire::Reader& r) {
  const auto n = r.u8();
  auto b = r.bytes(n);
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace

void put_control_string(wire::Writer& w, const std::string& s) { put_string(w, s); }
std::string get_control_string(wire::Reader& r) { return get_string(r); }

void encode_view(const ViewPush& msg, std::vector<std::byte>& out) {
  wire::Writer w(out);
  w.u64(msg.view);
  w.u32(static_cast<std::uint32_t>(msg.members.size()));
  for (const auto& a : msg.members) {
    w.u32(a.id);
    put_string(w, a.host);
    w.u16(a.port);
    w.u64(a.host_id);
  }
  w.u8(static_cast<std::uint8_t>((msg.ends_flush ? kEndsFlush : 0) | (msg.multicast_emulated ? kEmulated : 0)));
  w.u32(static_cast<std::uint32_t>(msg.starts.size()));
  for (const auto& st : msg.starts) {
    w.u32(st.member);
    w.u64(st.next_small);
    w.u64(st.next_large);
  }
}

std::optional<ViewPush> decode_view(wire::Reader& r) {
  ViewPush v;
  v.view = r.u64();
  const auto n = r.u32();
  // Each member takes at least 15 bytes: refuse counts the input cannot hold
  // before reserving anything.
  if (n > kMaxViewMembers || n > r.remaining() / 15) return std::nullopt;
  v.members.reserve(n);
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
    MemberAddress a;
    a.id = r.u32();
    a.host = get_string(r);
    a.port = r.u16();
    a.host_id = r.u64();
    if (!v.members.empty() && a.id <= v.members.back().id) return std::nullopt;  // sorted, distinct
    v.members.push_back(std::move(a));
  }
  const auto flags = r.u8();
  if ((flags & ~(kEndsFlush | kEmulated)) != 0) return std::nullopt;
  v.ends_flush = (flags & kEndsFlush) != 0;
  v.multicast_emulated = (flags & kEmulated) != 0;
  const auto k = r.u32();
  if (k > kMaxViewMembers || k > r.remaining() / 20) return std::nullopt;  // 20 bytes each
  v.starts.reserve(k);
  for (std::uint32_t i = 0; i < k && r.ok(); ++i) {
    StreamStart st;
    st.member = r.u32();
    st.next_small = r.u64();
    st.next_large = r.u64();
    if (st.next_small == 0 || st.next_large == 0) return std::nullopt;  // seqs start at 1
    if (!v.starts.empty() && st.member <= v.starts.back().member) return std::nullopt;
    v.starts.push_back(st);
  }
  if (!r.ok()) return std::nullopt;
  return v;
}

std::vector<std::byte> encode(const ControlMessage& m) {
  std::vector<std::byte> out{kMagic0, kMagic1, kMagic2, std::byte{kControlVersion},
                             static_cast<std::byte>(m.index())};
  wire::Writer w(out);
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Join>) {
          put_string(w, msg.group);
          w.u32(msg.expected_size);
        } else if constexpr (std::is_same_v<T, Welcome>) {
          w.u64(msg.group_id);
          w.u32(msg.member);
          w.u32(msg.multicast_address);
          w.u16(msg.multicast_port);
        } else if constexpr (std::is_same_v<T, Listening>) {
          put_string(w, msg.host);
          w.u16(msg.port);
          w.u64(msg.host_id);
        } else if constexpr (std::is_same_v<T, ViewPush>) {
          encode_view(msg, out);
        } else if constexpr (std::is_same_v<T, SuspectReport>) {
          w.u64(msg.view);
          w.u32(msg.member);
        } else if constexpr (std::is_same_v<T, Refused>) {
          put_string(w, msg.reason);
        } else if constexpr (std::is_same_v<T, FlushRequest>) {
          w.u64(msg.view);
        } else if constexpr (std::is_same_v<T, Flushed>) {
          w.u64(msg.view);
          w.u64(msg.next_small);
          w.u64(msg.next_large);
        } else if constexpr (std::is_same_v<T, MulticastFailed>) {
          w.u64(msg.view);
          w.u32(static_cast<std::uint32_t>(msg.silent.size()));
          for (MemberId id : msg.silent) w.u32(id);
        } else if constexpr (std::is_same_v<T, MulticastFallback>) {
          w.u64(msg.view);
        } else if constexpr (std::is_same_v<T, Rejoin>) {
          put_string(w, msg.group);
          w.u64(msg.group_id);
          w.u32(msg.member);
          w.u64(msg.view);
        } else {
          static_assert(std::is_same_v<T, Leave>, "every control message has an encoding");
        }
      },
      m);
  return out;
}

std::optional<ControlMessage> decode_control(std::span<const std::byte> bytes) {
  if (bytes.size() < 5 || bytes[0] != kMagic0 || bytes[1] != kMagic1 || bytes[2] != kMagic2 ||
      bytes[3] != std::byte{kControlVersion})
    return std::nullopt;
  wire::Reader r(bytes.subspan(5));
  std::optional<ControlMessage> m;
  switch (std::to_integer<std::uint8_t>(bytes[4])) {
    case 0: {
      Join j;
      j.group = get_string(r);
      j.expected_size = r.u32();
      m = j;
      break;
    }
    case 1: {
      Welcome w;
      w.group_id = r.u64();
      w.member = r.u32();
      w.multicast_address = r.u32();
      w.multicast_port = r.u16();
      m = w;
      break;
    }
    case 2: {
      Listening l;
      l.host = get_string(r);
      l.port = r.u16();
      l.host_id = r.u64();
      m = l;
      break;
    }
    case 3: {
      auto v = decode_view(r);
      if (!v) return std::nullopt;
      m = std::move(*v);
      break;
    }
    case 4: {
      SuspectReport s;
      s.view = r.u64();
      s.member = r.u32();
      m = s;
      break;
    }
    case 5:
      m = Leave{};
      break;
    case 6: {
      Refused f;
      f.reason = get_string(r);
      m = f;
      break;
    }
    case 7: {
      FlushRequest f;
      f.view = r.u64();
      m = f;
      break;
    }
    case 8: {
      Flushed f;
      f.view = r.u64();
      f.next_small = r.u64();
      f.next_large = r.u64();
      if (f.next_small == 0 || f.next_large == 0) return std::nullopt;
      m = f;
      break;
    }
    case 9: {
      MulticastFailed f;
      f.view = r.u64();
      const auto n = r.u32();
      if (n > kMaxViewMembers || n > r.remaining() / 4) return std::nullopt;
      f.silent.reserve(n);
      for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
        const MemberId id = r.u32();
        if (!f.silent.empty() && id <= f.silent.back()) return std::nullopt;  // sorted, distinct
        f.silent.push_back(id);
      }
      m = std::move(f);
      break;
    }
    case 10: {
      MulticastFallback f;
      f.view = r.u64();
      m = f;
      break;
    }
    case 11: {
      Rejoin j;
      j.group = get_string(r);
      j.group_id = r.u64();
      j.member = r.u32();
      j.view = r.u64();
      m = j;
      break;
    }
    default:
      return std::nullopt;
  }
  if (!r.ok() || r.remaining() != 0) return std::nullopt;
  return m;
}

View view_of(const ViewPush& v) {
  View out{v.view, {}};
  out.members.reserve(v.members.size());
  for (const auto& a : v.members) out.members.push_back(a.id);
  return out;
}

}  // namespace hmcast::membership
