// The progress of `hmcast cp` at the source: a bar redrawn in place on a terminal,
// plain lines (for logs and pipes) otherwise. Bytes count when every receiver holds them.
#pragma once

#include <cstdint>
#include <cstdio>

namespace hmcast::tools::cp {

class Progress {
 public:
  /// `out` is where lines go (stderr; null: nowhere); `terminal`: redraw one line in place.
  Progress(std::FILE* out, std::uint64_t total, bool terminal);
  /// `done` bytes of the total are at every receiver; prints when it is time to.
  void update(std::uint64_t done);
  /// The last line (once), whatever the time since the previous one.
  void finish(std::uint64_t done);

 private:
  void print(std::uint64_t done, bool last);
  std::FILE* out_;
  std::uint64_t total_;
  bool terminal_;
  std::int64_t start_ns_;
  std::int64_t last_print_ns_ = 0;
  bool finished_ = false;
};

}  // namespace hmcast::tools::cp
