#!/usr/bin/env bash
# Quick start 1: install, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo needs: its packages, and the hmcast tool (quick start 2 installs
# and builds the rest; the default preset turns tests, benchmarks and Python back on).
scripts/install-deps.sh --demo
cmake --preset default -DHMCAST_TESTS=OFF -DHMCAST_BENCH=OFF -DHMCAST_PYTHON=OFF >/dev/null
cmake --build --preset default --target hmcast_cli
build/bin/hmcast demo "$@"
