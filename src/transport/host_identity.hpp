// Which host a member runs on, as a number it tells the group when it joins
// (membership::Listening::host_id): members that name the same host can share
// memory (issue 18's two-level group; membership/host_layout.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace hmcast::transport {

/// `name`'s hash when it is not empty (Config::host_identity). Otherwise one made
/// of the kernel's boot id (one per running kernel), the device and inode of
/// /dev/shm (where the shm transport's files live: one per mount of it) and the
/// inode of this process's network namespace (so namespaces count as hosts, as on
/// the emulated cluster). Never 0 (0 says "not said"). Whatever cannot be read
/// counts as empty; two processes that differ only in what they could not read
/// may then take each other for neighbours, which costs speed, never correctness
/// (the shm transport checks the files it maps).
std::uint64_t host_identity(const std::string& name);

}  // namespace hmcast::transport
