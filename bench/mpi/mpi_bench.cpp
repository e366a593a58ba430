// hmcast_mpi_bench: the baseline users run today, timed the way `hmcast bench` times.
//
// For each message size, two series of broadcasts from rank 0:
//   bcast          MPI_Bcast alone: from the root's start until the LAST rank has
//                  the data (the analogue of hmcast's last-delivery time);
//   bcast_barrier  MPI_Bcast then MPI_Barrier: from the root's start until its
//                  barrier returns, the first moment the root KNOWS every rank has
//                  the data (the analogue of hmcast's all-acked completion).
// Times come from CLOCK_MONOTONIC, one clock shared by every process of a host
// (ranks on one machine, or in network namespaces of one machine): timing each rank
// by its own start would under-report, as data can reach a rank before it leaves
// the barrier that precedes each broadcast.
//
// With --stream, instead: the root broadcasts a stream of messages back to back
// (the counts of `hmcast bench`'s throughput runs), then MPI_Barrier; from the first
// MPI_Bcast to the barrier's return at the root (the analogue of a stream of hmcast
// broadcasts whose last one is all-acked): messages/s and MB/s.
//
// With --ibcast, every MPI_Bcast above is an MPI_Ibcast and its MPI_Wait.
//
// Every row also says how much CPU all ranks spent on it, per GB the non-root ranks
// received (user and system time of every thread, warm-up included).
//
// Output: a table on stdout, CSV with --csv FILE, and with --json one JSON object as
// the last line. Every received buffer is checked against the pattern the root
// wrote; a mismatch makes the run fail (exit 1) and shows in the "ok" field.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mono_clock.hpp"
#include "size_text.hpp"

namespace {

using hmcast::tools::mono_ns;
using hmcast::tools::parse_size;
using hmcast::tools::split_list;

/// The same message counts as `hmcast bench` uses for its throughput runs.
int stream_count(std::uint64_t size, double scale) {
  const double n = size <= 4096 ? 5000 : size <= (2U << 20) ? 200 : 8;
  return std::max(3, static_cast<int>(n * scale));
}

/// The same message counts as `hmcast bench` uses for its latency runs.
int iterations(std::uint64_t size, double scale) {
  const double n = size <= (64U << 10) ? 400 : size <= (2U << 20) ? 40 : 6;
  return std::max(3, static_cast<int>(n * scale));
}

/// This process's CPU seconds so far, user and system, all its threads (Open MPI's
/// progress threads included).
double process_cpu_s() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return 0;
  const auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

/// Byte i of broadcast number `iter`: differs between broadcasts, so a rank that
/// kept an old buffer is caught.
unsigned char pattern(std::uint64_t i, int iter) {
  return static_cast<unsigned char>((i * 131U + static_cast<std::uint64_t>(iter) * 7U + 1U) & 0xffU);
}

void fill(std::vector<unsigned char>& buf, int iter) {
  for (std::uint64_t i = 0; i < buf.size(); ++i) buf[i] = pattern(i, iter);
}

/// Checks up to 4096 spread-out bytes (all of a small message): enough to catch a
/// stale or misplaced buffer without making large runs memory-bound.
bool check(const std::vector<unsigned char>& buf, int iter) {
  const std::uint64_t n = buf.size();
  const std::uint64_t step = std::max<std::uint64_t>(1, n / 4096);
  for (std::uint64_t i = 0; i < n; i += step)
    if (buf[i] != pattern(i, iter)) return false;
  return n == 0 || buf[n - 1] == pattern(n - 1, iter);
}

struct Options {
  std::vector<std::uint64_t> sizes{8, 2048};
  double scale = 1.0;
  int warmup = 3;
  std::string label = "MPI_Bcast";
  std::string csv;
  bool json = false;
  bool stream = false;
  bool ibcast = false;  // MPI_Ibcast then MPI_Wait in place of MPI_Bcast
};

/// One broadcast from rank 0 as the options say.
void broadcast(const Options& o, void* buf, int count) {
  if (!o.ibcast) {
    MPI_Bcast(buf, count, MPI_BYTE, 0, MPI_COMM_WORLD);
    return;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Ibcast(buf, count, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--sizes") {
      o.sizes.clear();
      for (const auto& s : split_list(value())) o.sizes.push_back(parse_size(s));
    } else if (a == "--scale") {
      o.scale = std::stod(value());
      if (!(o.scale >= 0.01 && o.scale <= 100)) throw std::invalid_argument("--scale must be in [0.01, 100]");
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else if (a == "--label") {
      o.label = value();
    } else if (a == "--csv") {
      o.csv = value();
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--stream") {
      o.stream = true;
    } else if (a == "--ibcast") {
      o.ibcast = true;
      if (o.label == "MPI_Bcast") o.label = "MPI_Ibcast+MPI_Wait";
    } else if (a == "--help" || a == "-h") {
      std::cout << "usage: mpirun ... hmcast_mpi_bench [--sizes 8,2KiB,64MiB] [--scale S] [--warmup W]\n"
                   "                 [--label NAME] [--csv FILE] [--json] [--stream] [--ibcast]\n";
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown option '" + a + "' (see --help)");
    }
  }
  return o;
}

struct Row {
  std::uint64_t size = 0;
  int iters = 0;
  /// Broadcasts of the row, warm-up included (the CPU below is spent on all of them).
  std::uint64_t broadcasts = 0;
  /// CPU seconds (user and system, every thread) of all ranks over the row.
  double cpu_s = 0;
  double bcast_p50 = 0, bcast_p99 = 0, barrier_p50 = 0, barrier_p99 = 0;
  double stream_s = 0;  // --stream: first MPI_Bcast to the barrier's return at the root
  bool ok = true;
};

/// CPU seconds per GB delivered: the ranks' CPU over the bytes the non-root ranks got,
/// the figure `hmcast bench` reports for its members (polling is not free).
double cpu_per_gb(const Row& r, int ranks) {
  const double gb = static_cast<double>(r.size) * static_cast<double>(r.broadcasts) * std::max(1, ranks - 1) / 1e9;
  return gb > 0 ? r.cpu_s / gb : 0;
}

/// --stream: `iters` broadcasts back to back, then one barrier. Each message carries
/// its number in its first 4 bytes (the rest is the pattern of message 0), which every
/// rank checks; the last message is checked like the latency runs' buffers.
Row measure_stream(std::uint64_t size, const Options& o, int rank) {
  Row r;
  r.size = size;
  r.iters = stream_count(size, o.scale);
  r.broadcasts = static_cast<std::uint64_t>(r.iters + o.warmup);
  std::vector<unsigned char> buf(size);
  fill(buf, 0);
  const double cpu0 = process_cpu_s();
  const int count = static_cast<int>(size);
  int bad = 0;
  const auto stamp = [&](int k) {
    if (size >= 4) std::memcpy(buf.data(), &k, 4);
  };
  const auto stamped = [&](int k) {
    int got = 0;
    if (size >= 4) std::memcpy(&got, buf.data(), 4);
    return size < 4 || got == k;
  };
  for (int k = 0; k < o.warmup; ++k) broadcast(o, buf.data(), count);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::int64_t t0 = mono_ns();
  for (int k = 0; k < r.iters; ++k) {
    if (rank == 0) stamp(k);
    broadcast(o, buf.data(), count);
    if (rank != 0 && !stamped(k)) ++bad;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  r.stream_s = static_cast<double>(mono_ns() - t0) / 1e9;
  if (rank != 0) {
    // Past the stamp, the last message holds the pattern of message 0.
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(4, size); ++i) buf[i] = pattern(i, 0);
    if (!check(buf, 0)) ++bad;
  }
  const double cpu = process_cpu_s() - cpu0;
  MPI_Reduce(&cpu, &r.cpu_s, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  int bad_total = 0;
  MPI_Reduce(&bad, &bad_total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  r.ok = bad_total == 0;
  return r;
}

Row measure(std::uint64_t size, const Options& o, int rank, int ranks) {
  Row r;
  r.size = size;
  r.iters = iterations(size, o.scale);
  r.broadcasts = 2 * static_cast<std::uint64_t>(r.iters + o.warmup);  // two series per iteration
  std::vector<unsigned char> buf(size);
  const int count = static_cast<int>(size);
  std::vector<double> bcast_us, barrier_us;
  const double cpu0 = process_cpu_s();
  std::vector<std::int64_t> arrivals(static_cast<std::size_t>(ranks));
  int bad = 0;
  for (int iter = -o.warmup; iter < r.iters; ++iter) {
    const int tag = iter + o.warmup;  // distinct pattern per broadcast, warm-up included
    // Series 1: MPI_Bcast alone, until the last rank has the data.
    if (rank == 0) fill(buf, tag);
    MPI_Barrier(MPI_COMM_WORLD);
    std::int64_t t0 = 0;
    if (rank == 0) t0 = mono_ns();
    broadcast(o, buf.data(), count);
    std::int64_t arrived = mono_ns();
    if (rank != 0 && !check(buf, tag)) ++bad;
    MPI_Gather(&arrived, 1, MPI_INT64_T, arrivals.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0 && iter >= 0) {
      std::int64_t last = t0;
      for (int k = 1; k < ranks; ++k) last = std::max(last, arrivals[static_cast<std::size_t>(k)]);
      bcast_us.push_back(static_cast<double>(last - t0) / 1e3);
    }
    // Series 2: MPI_Bcast + MPI_Barrier, until the root's barrier returns.
    if (rank == 0) fill(buf, tag + 1'000'000);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) t0 = mono_ns();
    broadcast(o, buf.data(), count);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0 && iter >= 0) barrier_us.push_back(static_cast<double>(mono_ns() - t0) / 1e3);
    if (rank != 0 && !check(buf, tag + 1'000'000)) ++bad;
  }
  const double cpu = process_cpu_s() - cpu0;
  MPI_Reduce(&cpu, &r.cpu_s, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  int bad_total = 0;
  MPI_Reduce(&bad, &bad_total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  r.ok = bad_total == 0;
  r.bcast_p50 = percentile(bcast_us, 0.50);
  r.bcast_p99 = percentile(bcast_us, 0.99);
  r.barrier_p50 = percentile(barrier_us, 0.50);
  r.barrier_p99 = percentile(barrier_us, 0.99);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    if (rank == 0) std::cerr << "hmcast_mpi_bench: " << e.what() << "\n";
    MPI_Finalize();
    return 2;
  }
  std::vector<Row> rows;
  for (const auto size : o.sizes) {
    if (size > static_cast<std::uint64_t>(INT32_MAX)) {
      if (rank == 0) std::cerr << "hmcast_mpi_bench: size " << size << " is over MPI's int count; skipped\n";
      continue;
    }
    rows.push_back(o.stream ? measure_stream(size, o, rank) : measure(size, o, rank, ranks));
    if (rank == 0 && o.stream) {
      const auto& r = rows.back();
      std::printf("%-10s procs %2d size %10llu  stream of %d: %.3f s, %.0f messages/s, %.1f MB/s, CPU %.2f s/GB%s\n",
                  o.label.c_str(), ranks, static_cast<unsigned long long>(r.size), r.iters, r.stream_s,
                  r.iters / r.stream_s, static_cast<double>(r.size) * r.iters / 1e6 / r.stream_s, cpu_per_gb(r, ranks),
                  r.ok ? "" : "  DATA MISMATCH");
      std::fflush(stdout);
    } else if (rank == 0) {
      const auto& r = rows.back();
      std::printf("%-10s procs %2d size %10llu  bcast p50 %10.1f us p99 %10.1f us  bcast+barrier p50 %10.1f us p99 "
                  "%10.1f us  CPU %.2f s/GB%s\n",
                  o.label.c_str(), ranks, static_cast<unsigned long long>(r.size), r.bcast_p50, r.bcast_p99,
                  r.barrier_p50, r.barrier_p99, cpu_per_gb(r, ranks), r.ok ? "" : "  DATA MISMATCH");
      std::fflush(stdout);
    }
  }
  bool all_ok = true;
  if (rank == 0) {
    for (const auto& r : rows) all_ok = all_ok && r.ok;
    if (!o.csv.empty()) {
      std::ofstream f(o.csv);
      f << "label,procs,size,iters,bcast_p50_us,bcast_p99_us,bcast_barrier_p50_us,bcast_barrier_p99_us,cpu_s_per_gb,ok\n";
      for (const auto& r : rows)
        f << o.label << "," << ranks << "," << r.size << "," << r.iters << "," << r.bcast_p50 << "," << r.bcast_p99
          << "," << r.barrier_p50 << "," << r.barrier_p99 << "," << cpu_per_gb(r, ranks) << "," << (r.ok ? "true" : "false") << "\n";
    }
    if (o.json) {
      std::ostringstream j;
      j << "{\"label\":\"" << o.label << "\",\"procs\":" << ranks << ",\"ok\":" << (all_ok ? "true" : "false")
        << ",\"rows\":[";
      for (std::size_t k = 0; k < rows.size(); ++k) {
        const auto& r = rows[k];
        j << (k ? "," : "") << "{\"size\":" << r.size << ",\"iters\":" << r.iters << ",\"bcast_p50_us\":" << r.bcast_p50
          << ",\"bcast_p99_us\":" << r.bcast_p99 << ",\"bcast_barrier_p50_us\":" << r.barrier_p50
          << ",\"bcast_barrier_p99_us\":" << r.barrier_p99 << ",\"stream_s\":" << r.stream_s
          << ",\"stream_msgs_per_s\":" << (r.stream_s > 0 ? r.iters / r.stream_s : 0)
          << ",\"cpu_s\":" << r.cpu_s << ",\"cpu_s_per_gb\":" << cpu_per_gb(r, ranks)
          << ",\"ok\":" << (r.ok ? "true" : "false") << "}";
      }
      j << "]}";
      std::cout << j.str() << std::endl;
    }
  }
  int ok_flag = all_ok ? 1 : 0;
  MPI_Bcast(&ok_flag, 1, MPI_INT, 0, MPI_COMM_WORLD);  // every rank exits with the verdict
  MPI_Finalize();
  return ok_flag == 1 ? 0 : 1;
}
