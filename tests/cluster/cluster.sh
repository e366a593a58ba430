#!/usr/bin/env bash
# An emulated cluster on one Linux host: N network namespaces hm1..hmN, each with
# one interface (10.77.0.i/24) on a Linux bridge with multicast snooping off (so
# every host hears the group's UDP multicast), an optional tbf rate limit per host,
# and the bridge itself at 10.77.0.254 for the membership manager. Needs root.
#
#   tests/cluster/cluster.sh up N [RATE]   e.g. up 8 1gbit
#   tests/cluster/cluster.sh down
#
# TBF_LATENCY (default 50ms) bounds each rate limiter's queue: how long a packet
# may wait behind the host's own traffic (a host sending at full rate delays its
# ACKs and credits by up to this much).
#
# Only these namespaces and this bridge carry the traffic: nothing leaves the host.
set -euo pipefail
BRIDGE=hmbr0
PREFIX=10.77.0

down() {
  for ns in $(ip netns list 2>/dev/null | awk '/^hm[0-9]+/ {print $1}'); do ip netns del "$ns" 2>/dev/null || true; done
  ip link del "$BRIDGE" 2>/dev/null || true
  # A namespace's devices go away after `ip netns del` returns: the host ends of the
  # veths can outlive it for a moment, and the next `up` then finds hmvN taken
  # ("RTNETLINK answers: File exists"). Remove them and wait until none is left (5 s).
  local i
  for i in $(seq 1 50); do
    local left
    left=$(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^hmv[0-9]+(@|$)/ {sub(/@.*/, "", $2); print $2}')
    [ -z "$left" ] && return 0
    for dev in $left; do ip link del "$dev" 2>/dev/null || true; done
    sleep 0.1
  done
  echo "cluster.sh: host ends of old veths are still there: $left" >&2
  return 1
}

up() {
  local n="$1" rate="${2:-}"
  if [ "$(id -u)" -ne 0 ]; then echo "cluster.sh: needs root (network namespaces and a bridge)" >&2; exit 2; fi
  if [ "$n" -lt 1 ] || [ "$n" -gt 250 ]; then echo "cluster.sh: N must be in [1, 250]" >&2; exit 2; fi
  down
  ip link add "$BRIDGE" type bridge
  echo 0 > "/sys/class/net/$BRIDGE/bridge/multicast_snooping"
  ip addr add "$PREFIX.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq 1 "$n"); do
    local ns="hm$i" host_if="hmv$i"
    ip netns add "$ns"
    ip link add "$host_if" type veth peer name eth0 netns "$ns"
    ip link set "$host_if" master "$BRIDGE"
    ip link set "$host_if" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$PREFIX.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    # Multicast leaves through the cluster interface.
    ip -n "$ns" route add 224.0.0.0/4 dev eth0
    if [ -n "$rate" ]; then
      # Egress of each host, and of the bridge port towards it (its ingress).
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency "${TBF_LATENCY:-50ms}"
      tc qdisc add dev "$host_if" root tbf rate "$rate" burst 256kb latency "${TBF_LATENCY:-50ms}"
    fi
  done
  # Wait for the bridge ports to forward (no STP on a fresh bridge, but links take a moment).
  for _ in $(seq 1 50); do
    if ip netns exec hm1 ping -c1 -W1 "$PREFIX.254" >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  echo "cluster up: $n hosts ${PREFIX}.1..${PREFIX}.$n on $BRIDGE${rate:+, each limited to $rate}"
}

case "${1:-}" in
  up) up "${2:?usage: cluster.sh up N [RATE]}" "${3:-}" ;;
  down) down ;;
  *) echo "usage: cluster.sh up N [RATE] | down" >&2; exit 2 ;;
esac
