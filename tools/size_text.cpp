#include "size_text.hpp"

#include <cctype>
#include <cstdio>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace hmcast::tools {

std::uint64_t parse_size(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0) ++i;
  if (i == 0 || i > 15) throw std::invalid_argument("'" + text + "' is not a size (e.g. 64, 2KiB, 1MiB)");
  std::uint64_t v = std::stoull(text.substr(0, i));
  const std::string unit = text.substr(i);
  std::uint64_t mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KiB") mult = 1ULL << 10;
  else if (unit == "M" || unit == "MB" || unit == "MiB") mult = 1ULL << 20;
  else if (unit == "G" || unit == "GB" || unit == "GiB") mult = 1ULL << 30;
  else throw std::invalid_argument("unknown size unit in '" + text + "' (use B, KiB, MiB or GiB)");
  return v * mult;
}

std::string format_size(std::uint64_t b) {
  if (b >= (1ULL << 30) && b % (1ULL << 30) == 0) return std::to_string(b >> 30) + "GiB";
  if (b >= (1ULL << 20) && b % (1ULL << 20) == 0) return std::to_string(b >> 20) + "MiB";
  if (b >= (1ULL << 10) && b % (1ULL << 10) == 0) return std::to_string(b >> 10) + "KiB";
  return std::to_string(b) + "B";
}

std::string format_duration_us(double us) {
  const char* unit = "us";
  double v = us;
  if (us >= 1e6) {
    v = us / 1e6;
    unit = "s";
  } else if (us >= 1e3) {
    v = us / 1e3;
    unit = "ms";
  }
  char text[32];
  std::snprintf(text, sizeof text, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, unit);
  return text;
}

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t u = 0;
  while (bytes >= 1024 && u + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++u;
  }
  char text[32];
  if (u == 0) {
    std::snprintf(text, sizeof text, "%.0f B", bytes);
  } else {
    std::snprintf(text, sizeof text, bytes >= 100 ? "%.0f %s" : bytes >= 10 ? "%.1f %s" : "%.2f %s", bytes, kUnits[u]);
  }
  return text;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace hmcast::tools
