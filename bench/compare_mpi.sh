#!/usr/bin/env bash
# hmcast against Open MPI, side by side in one run (bench/compare_mpi.py does the work).
#
#   bench/compare_mpi.sh [--quick] [--docs] [--out DIR] [--rate RATE]
#
#   --quick   the must-show figures only (8 processes at 2 KiB on loopback; 64 MiB on
#             8 emulated hosts: binomial pipeline, sequential, one unicast); < 10 min
#   --docs    also write the charts into docs/benchmarks/ and the tables into
#             docs/benchmarks.md (the full run that the docs show)
#   --out     where CSV, JSON, PNG and the markdown table go (default build/compare)
#   --rate    per-host rate of the emulated cluster (default 200mbit)
# The last line printed is one JSON object with the ratios (see docs/benchmarks.md).
# Needs build/bin/hmcast and build/bin/hmcast_mpi_bench; the emulated cluster needs
# root and iproute2 (without them the large-message part is skipped and says so).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3  # Debian's, with python3-matplotlib
exec "$PY" bench/compare_mpi.py "$@"
