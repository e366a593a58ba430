// What a coordinator must know to take a group over from one that died: the record
// it keeps of each group in a store that outlives it (ZooKeeper,
// transport/zookeeper/zk_coordination.hpp), written before any member hears of the
// view it holds. Versioned and bounds-checked like the control protocol; a record
// that does not decode is not adopted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "membership/control_wire.hpp"

namespace hmcast::membership {

inline constexpr std::uint8_t kGroupRecordVersion = 2;  // v2: views carry host identities

struct GroupRecord {
  std::string name;
  GroupId id = 0;
  std::uint32_t expected = 0;
  std::uint32_t multicast_address = 0;
  std::uint16_t multicast_port = 0;
  MemberId next_id = 1;  // ids are never reused: the next coordinator goes on from here
  ViewPush view;         // the last view issued (multicast_emulated says how the group runs)
  friend bool operator==(const GroupRecord&, const GroupRecord&) = default;
};

std::vector<std::byte> encode(const GroupRecord& r);
/// Nothing unless `bytes` is exactly one well-formed record of this version.
std::optional<GroupRecord> decode_group_record(std::span<const std::byte> bytes);

}  // namespace hmcast::membership
