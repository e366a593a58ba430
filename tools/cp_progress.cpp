#include "cp_progress.hpp"

#include <algorithm>
#include <string>

#include "mono_clock.hpp"
#include "size_text.hpp"

namespace hmcast::tools::cp {
namespace {
// A terminal redraws often enough to look alive; a log gets a line every few seconds.
constexpr std::int64_t kTerminalEveryNs = 200'000'000;
constexpr std::int64_t kPlainEveryNs = 5'000'000'000;
}  // namespace

Progress::Progress(std::FILE* out, std::uint64_t total, bool terminal)
    : out_(out), total_(total), terminal_(terminal), start_ns_(mono_ns()) {}

void Progress::update(std::uint64_t done) {
  const auto now = mono_ns();
  if (now - last_print_ns_ < (terminal_ ? kTerminalEveryNs : kPlainEveryNs)) return;
  print(done, false);
}

void Progress::finish(std::uint64_t done) {
  if (finished_) return;
  finished_ = true;
  print(done, true);
}

void Progress::print(std::uint64_t done, bool last) {
  if (out_ == nullptr) return;
  const auto now = mono_ns();
  last_print_ns_ = now;
  const double secs = static_cast<double>(now - start_ns_) / 1e9;
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;  // bytes/s
  const double frac = total_ == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total_);
  std::string eta = "-";
  if (last) {
    eta = "done in " + format_duration_us(secs * 1e6);
  } else if (rate > 0) {
    eta = "ETA " + format_duration_us(static_cast<double>(total_ - std::min(done, total_)) / rate * 1e6);
  }
  const std::string figures = format_bytes(static_cast<double>(done)) + " of " + format_bytes(static_cast<double>(total_)) + " (" +
                              std::to_string(static_cast<int>(frac * 100)) + "%), " +
                              format_bytes(rate) + "/s, " + eta;
  if (terminal_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.append(static_cast<std::size_t>(kWidth - filled), '.');
    // \33[K clears what a longer previous line left behind.
    std::fprintf(out_, "\r[%s] %s\33[K%s", bar.c_str(), figures.c_str(), last ? "\n" : "");
  } else {
    std::fprintf(out_, "hmcast cp: %s\n", figures.c_str());
  }
  std::fflush(out_);
}

}  // namespace hmcast::tools::cp
