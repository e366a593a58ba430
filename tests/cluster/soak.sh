#!/usr/bin/env bash
# The soak across the emulated cluster: brings the cluster up, runs `hmcast soak`
# with one member per namespace and the manager on the bridge, tears it down.
# `--partition K` cuts K hosts off by taking their bridge ports down (and heals them).
# `--per-host N` puts N members in each namespace (the two-level group's shape).
#
#   tests/cluster/soak.sh [--rate RATE] [hmcast soak options...]
# e.g. tests/cluster/soak.sh --rate 1gbit --procs 8 --senders 4 --messages 10000 --loss 0.02 --kill 1 --json
set -euo pipefail
cd "$(dirname "$0")/../.."
RATE=""
if [ "${1:-}" = "--rate" ]; then RATE="$2"; shift 2; fi
PROCS=8
PER_HOST=1
args=("$@")
for ((k = 0; k < ${#args[@]}; k++)); do
  if [ "${args[$k]}" = "--procs" ]; then PROCS="${args[$((k + 1))]}"; fi
  if [ "${args[$k]}" = "--per-host" ]; then PER_HOST="${args[$((k + 1))]}"; fi
done
trap 'tests/cluster/cluster.sh down' EXIT
tests/cluster/cluster.sh up "$(( (PROCS + PER_HOST - 1) / PER_HOST ))" "$RATE" >&2
build/bin/hmcast soak --prefix "ip netns exec hm{i}" --interface-template "10.77.0.{i}" --manager-host 10.77.0.254 \
  --cut-command "ip link set hmv{i} down" --heal-command "ip link set hmv{i} up" "$@"
