// What `hmcast cp` sends: the files and directories under the paths a user names,
// each with the relative name it gets at the receivers (as `cp -r` names them:
// `hmcast cp data/set1 --into /srv` makes /srv/set1/...).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace hmcast::tools::cp {

struct SourceEntry {
  std::filesystem::path path;  // where it is here
  std::string name;            // its relative name at the receivers (valid_relative_name)
  std::uint64_t size = 0;      // files only
  std::uint32_t mode = 0;      // permission bits
};

struct SourceTree {
  std::vector<SourceEntry> directories;  // parents before children
  std::vector<SourceEntry> files;
  std::uint64_t bytes = 0;
  std::vector<std::string> skipped;  // symbolic links and special files: "PATH (why)"
};

/// Walks the paths (files or directories). Throws std::runtime_error saying what to
/// fix: a path that does not exist or cannot be read, two paths with one name, a
/// name over the limits of the wire format (cp_wire.hpp).
[[nodiscard]] SourceTree scan_sources(const std::vector<std::string>& paths);

}  // namespace hmcast::tools::cp
