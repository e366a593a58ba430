#!/usr/bin/env bash
# Runs inside the VM that tests/rxe/run.sh boots (root, the host's root file system
# shared read-only): one Soft-RoCE device on a dummy netdev, then the verbs suites
# with the host's build. Everything it reports goes into $1 (a --rwdir, writable and
# seen by the host afterwards). Exit status: 0 only if every suite passed.
set -uo pipefail
out="$1"; hm="$2"
log() { echo "guest: $*"; }
fail=0

ulimit -l unlimited          # verbs pins the memory it registers
modprobe rdma_rxe && modprobe dummy || { log "cannot load rdma_rxe/dummy"; exit 10; }
ip link add d0 type dummy
ip link set d0 mtu 9000      # a RoCE path MTU of 4096 (1500 would give 1024)
ip addr add 10.77.0.1/24 dev d0
ip link set d0 up
ip link set lo up
ip route add 224.0.0.0/4 dev d0
rdma link add rxe0 type rxe netdev d0 || { log "cannot create rxe0"; exit 11; }
ibv_devinfo -d rxe0 >"$out/ibv_devinfo.txt" 2>&1
grep -q PORT_ACTIVE "$out/ibv_devinfo.txt" || { log "rxe0 has no active port"; exit 12; }
log "rxe0 up: $(grep -E 'active_mtu' "$out/ibv_devinfo.txt" | tr -s ' \t' ' ')"

run_suite() {  # run_suite <name> <seconds> <command...>: stdout to $out/<name>.out
  local name="$1" secs="$2"; shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$secs" "$@" >"$out/$name.out" 2>"$out/$name.err"
  local rc=$?
  echo "$rc" >"$out/$name.rc"
  log "$name: exit $rc after $(( $(date +%s) - t0 )) s"
  [ "$rc" -eq 0 ] || fail=1
}

SUITES="${HMCAST_RXE_SUITES:-all}"
. "$(dirname "$0")/suites.sh"

exit "$fail"
