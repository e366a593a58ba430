#!/usr/bin/env bash
# Quick start 1: install, build, run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
build/bin/hmcast demo "$@"
