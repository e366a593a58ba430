// Sizes and lists as users type them on command lines: shared by the hmcast tool
// and the MPI baseline (bench/mpi), so both read `--sizes` the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hmcast::tools {

/// Parses "4096", "2KiB", "1MiB", "3GiB" (also K, M, G and KB, MB, GB as powers of 1024).
std::uint64_t parse_size(const std::string& text);
std::string format_size(std::uint64_t bytes);
/// A time in the unit that reads: "850 us", "12.3 ms", "1.27 s" (three significant digits).
std::string format_duration_us(double us);
/// An amount of data in the unit that reads: "512 B", "3.50 KiB", "1.00 GiB" (three significant digits).
std::string format_bytes(double bytes);
/// "a,b,,c" -> {"a", "b", "c"}: the non-empty comma-separated items.
std::vector<std::string> split_list(const std::string& text);

}  // namespace hmcast::tools
