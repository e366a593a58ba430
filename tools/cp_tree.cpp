#include "cp_tree.hpp"

#include <set>
#include <stdexcept>
#include <system_error>

#include "cp_wire.hpp"

namespace hmcast::tools::cp {
namespace fs = std::filesystem;
namespace {

std::uint32_t mode_of(const fs::file_status& st) {
  return static_cast<std::uint32_t>(st.permissions()) & kModeMask;
}

void check_name(const std::string& name, const fs::path& where) {
  if (!valid_relative_name(name))
    throw std::runtime_error(where.string() + ": its name '" + name + "' cannot be sent (longer than " +
                             std::to_string(kMaxName) + " bytes, or not a plain relative path)");
}

void add_entry(SourceTree& t, const fs::path& path, const std::string& name, const fs::file_status& st) {
  if (fs::is_symlink(st)) {
    t.skipped.push_back(path.string() + " (a symbolic link: not followed)");
  } else if (fs::is_directory(st)) {
    check_name(name, path);
    t.directories.push_back({path, name, 0, mode_of(st)});
  } else if (fs::is_regular_file(st)) {
    check_name(name, path);
    if (t.files.size() >= kMaxFiles)
      throw std::runtime_error("more than " + std::to_string(kMaxFiles) + " files: copy them in several runs");
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw std::runtime_error(path.string() + ": " + ec.message());
    if (size > kMaxFileSize) throw std::runtime_error(path.string() + ": larger than hmcast cp's limit (1 PiB)");
    t.files.push_back({path, name, size, mode_of(st)});
    t.bytes += size;
  } else {
    t.skipped.push_back(path.string() + " (not a regular file or directory)");
  }
}

}  // namespace

SourceTree scan_sources(const std::vector<std::string>& paths) {
  SourceTree t;
  std::set<std::string> tops;
  for (const auto& p : paths) {
    std::error_code ec;
    const fs::path path(p);
    const auto st = fs::symlink_status(path, ec);
    if (ec || !fs::exists(st)) throw std::runtime_error(p + ": no such file or directory");
    // The name at the receivers: the last component, as `cp -r` does ("." and "dir/" too).
    fs::path abs = fs::weakly_canonical(fs::absolute(path), ec);
    if (ec) throw std::runtime_error(p + ": " + ec.message());
    const std::string top = abs.filename().string();
    if (top.empty()) throw std::runtime_error(p + ": cannot copy the root directory; name a directory under it");
    if (!tops.insert(top).second)
      throw std::runtime_error(p + ": another path has the same name '" + top + "' (they would overwrite each other)");
    if (fs::is_symlink(st)) {
      // A link the user named is what they mean: follow it (but not links inside).
      const auto target = fs::status(path, ec);
      if (ec) throw std::runtime_error(p + ": " + ec.message());
      add_entry(t, path, top, target);
    } else {
      add_entry(t, path, top, st);
    }
    if (!fs::is_directory(fs::status(path, ec))) continue;
    fs::recursive_directory_iterator it(path, fs::directory_options::none, ec), end;
    if (ec) throw std::runtime_error(p + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) throw std::runtime_error(p + ": " + ec.message());
      const auto rel = fs::relative(it->path(), path, ec).generic_string();
      if (ec) throw std::runtime_error(it->path().string() + ": " + ec.message());
      add_entry(t, it->path(), top + "/" + rel, it->symlink_status());
    }
    if (ec) throw std::runtime_error(p + ": " + ec.message());
  }
  return t;
}

}  // namespace hmcast::tools::cp
