// The receiving side of `hmcast cp`: writes what the source broadcasts under a
// directory, each file through a temporary name that is renamed once the file is
// whole and its checksum, read back from the disk, matches the source's; then
// reports its verdict to the group and waits for the source to finish.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "hmcast/hmcast.hpp"

namespace hmcast::tools::cp {

struct ReceiveOptions {
  std::filesystem::path into;
  bool fsync = true;                            // files reach the disk before they are renamed
  std::uint64_t queue_bytes = 256ULL << 20;     // delivered, not yet written (memory bound)
  std::optional<std::uint64_t> crash_after;     // tests: SIGKILL itself once this many bytes are written
};

struct ReceiveOutcome {
  nlohmann::json summary;
  bool ok = false;  // every file of the transfer is here and verified
};

/// Receives one transfer through `g` (already joined); leaves the group before
/// it returns. An operating failure (a full disk, the source gone) is reported to
/// the group and in the outcome, never thrown; temporary files are removed.
ReceiveOutcome receive_tree(Group& g, const ReceiveOptions& o);

}  // namespace hmcast::tools::cp
