#!/usr/bin/env bash
# Open MPI's "remote shell" for the emulated cluster (plm_rsh_agent): mpirun
# starts its daemon on "host" 10.77.0.I by running the command in namespace hmI,
# as ssh would on a real host. Only the cluster's own addresses are accepted.
set -euo pipefail
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options: none apply here
host="${1:?usage: netns_rsh.sh HOST COMMAND...}"; shift
case "$host" in
  10.77.0.*) idx="${host##*.}" ;;
  hm[0-9]*) idx="${host#hm}" ;;
  *) echo "netns_rsh.sh: $host is not an emulated-cluster host (10.77.0.I)" >&2; exit 2 ;;
esac
# Its own UTS namespace named hmI: Open MPI tells hosts apart by name, and with one
# name for all it would take every namespace for one host and use shared memory
# (vader) between them, whose segments then collide.
exec ip netns exec "hm$idx" unshare --uts /bin/sh -c "hostname hm$idx && $*"
