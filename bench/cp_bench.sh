#!/usr/bin/env bash
# `hmcast cp` against copying to each host in turn and against one copy to one host.
#
#   bench/cp_bench.sh [--hosts N] [--rate RATE] [--total 1GiB] [--out FILE.json]
#                     [--only-hmcast] [--chunk SIZE] [--in-flight SIZE]   (tuning: hmcast cp alone)
#
# Builds a mixed tree (0 B to 256 MiB files, 1 GiB in total, random bytes) in
# /dev/shm, starts the emulated cluster (tests/cluster/cluster.sh: N+1 namespaces
# hm1..hm{N+1} on a bridge, each host limited to RATE, default 200mbit), and times,
# side by side in one run, from the source on hm1:
#   hmcast:     hmcast cp to N receivers (hm2..), each writing into its own directory
#   sequential: the tree to each of the N hosts in turn over TCP (bench/tree_copy.py: tar)
#   unicast:    the tree to one host over TCP
# Every receiver's tree is then checked against the source (md5sum of every file,
# apart from hmcast's own checksums). Prints one JSON line (also to --out).
# Needs root (namespaces) and about (N+1) x total of memory in /dev/shm.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=8 RATE=200mbit TOTAL=1GiB OUT="" ONLY="" SRC_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) HOSTS="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --total) TOTAL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --only-hmcast) ONLY=hmcast; shift ;;                 # tuning runs: no baselines
    --chunk|--in-flight) SRC_ARGS+=("$1" "$2"); shift 2 ;;  # passed to the source's hmcast cp
    *) echo "usage: bench/cp_bench.sh [--hosts N] [--rate RATE] [--total 1GiB] [--out FILE]" >&2; exit 2 ;;
  esac
done
H="$PWD/build/bin/hmcast"
[ -x "$H" ] || { echo "cp_bench.sh: build first (cmake --preset default && cmake --build --preset default)" >&2; exit 2; }
W=$(mktemp -d /dev/shm/hmcast-cp-bench.XXXXXX)
cleanup() {
  pkill -f "tree_copy.py recv" 2>/dev/null || true
  pkill -f "hmcast cp --receive --group cpbench" 2>/dev/null || true
  tests/cluster/cluster.sh down
  rm -rf "$W"
}
trap cleanup EXIT

/usr/bin/python3 - "$W/src/tree" "$TOTAL" <<'PY'
import os, sys
root, total = sys.argv[1], sys.argv[2]
units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
scale = next((int(total[:-3]) * m for u, m in units.items() if total.endswith(u)), None) or int(total)
scale /= 1 << 30  # the mix below is 1 GiB; --total scales it
M = 1 << 20
mix = [(256 * M, 1), (128 * M, 2), (64 * M, 4), (16 * M, 8), (4 * M, 23), (1 * M, 32), (64 << 10, 64),
       (1 << 10, 100), (4097, 3), (1, 2), (0, 10)]
n = 0
for size, count in mix:
    size = int(size * scale) if size >= M else size
    for _ in range(count):
        d = os.path.join(root, "d%d" % (n % 7), "e%d" % (n % 3)) if n % 5 else root
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%04d_%d" % (n, size)), "wb") as f:
            left = size
            while left:
                k = min(left, 8 * M)
                f.write(os.urandom(k))
                left -= k
        n += 1
os.makedirs(os.path.join(root, "empty_dir"), exist_ok=True)
PY
files=$(find "$W/src/tree" -type f | wc -l)
bytes=$(find "$W/src/tree" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
echo "tree: $files files, $bytes bytes; cluster: 1 source + $HOSTS hosts at $RATE"
(cd "$W/src" && find tree -type f -print0 | sort -z | xargs -0 md5sum) > "$W/src.md5"

tests/cluster/cluster.sh up $((HOSTS + 1)) "$RATE" >/dev/null
ns() { ip netns exec "hm$1" "${@:2}"; }
now() { date +%s%N; }  # ns
check_tree() {  # check_tree DIR: the same files, byte for byte
  (cd "$1" && find tree -type f -print0 | sort -z | xargs -0 md5sum) | cmp -s - "$W/src.md5"
}

echo "--- hmcast cp to $HOSTS hosts"
port=17990
for i in $(seq 2 $((HOSTS + 1))); do
  ns "$i" "$H" cp --receive --group cpbench --manager "10.77.0.1:$port" --size $((HOSTS + 1)) \
    --interface "10.77.0.$i" --into "$W/hm$i" --json --quiet > "$W/recv$i.json" &
done
t0=$(now)
ns 1 "$H" cp --group cpbench --manager "10.77.0.1:$port" --embed-manager --size $((HOSTS + 1)) \
  --interface 10.77.0.1 --json --quiet "${SRC_ARGS[@]}" "$W/src/tree" > "$W/send.json"
t_hmcast=$(( $(now) - t0 ))
wait
ok_hmcast=0
for i in $(seq 2 $((HOSTS + 1))); do check_tree "$W/hm$i" && ok_hmcast=$((ok_hmcast + 1)); rm -rf "$W/hm$i"; done
echo "hmcast: $((t_hmcast / 1000000)) ms, $ok_hmcast of $HOSTS trees identical"
if [ "$ONLY" = hmcast ]; then
  /usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({k: j[k] for k in ("seconds","seconds_with_verdicts","cpu_seconds","verified","ok")}))' "$W/send.json"
  [ "$ok_hmcast" = "$HOSTS" ]; exit
fi

tree_copy() {  # tree_copy HOST: the tree to hm$HOST over TCP
  local j="$1" p=$((18000 + $1))
  ns "$j" /usr/bin/python3 bench/tree_copy.py recv "$p" "$W/tc$j" > "$W/tc$j.log" &
  until grep -q listening "$W/tc$j.log" 2>/dev/null; do sleep 0.05; done
  ns 1 /usr/bin/python3 bench/tree_copy.py send "10.77.0.$j" "$p" "$W/src/tree"
  wait
}
echo "--- one copy to one host (unicast)"
t0=$(now)
tree_copy 2
t_unicast=$(( $(now) - t0 ))
ok_unicast=0; check_tree "$W/tc2" && ok_unicast=1; rm -rf "$W/tc2"
echo "unicast: $((t_unicast / 1000000)) ms"

echo "--- copies to $HOSTS hosts in turn (sequential)"
t0=$(now)
for j in $(seq 2 $((HOSTS + 1))); do tree_copy "$j"; done
t_seq=$(( $(now) - t0 ))
ok_seq=0
for j in $(seq 2 $((HOSTS + 1))); do check_tree "$W/tc$j" && ok_seq=$((ok_seq + 1)); rm -rf "$W/tc$j"; done
echo "sequential: $((t_seq / 1000000)) ms"

result=$(/usr/bin/python3 - "$W" "$HOSTS" "$RATE" "$files" "$bytes" "$t_hmcast" "$t_unicast" "$t_seq" \
  "$ok_hmcast" "$ok_unicast" "$ok_seq" <<'PY'
import glob, json, os, sys
w, hosts, rate, files, nbytes, t_h, t_u, t_s, ok_h, ok_u, ok_s = sys.argv[1:]
hosts, files, nbytes = int(hosts), int(files), int(nbytes)
send = json.load(open(os.path.join(w, "send.json")))
recv = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(w, "recv*.json")))]
cpu = send["cpu_seconds"] + sum(r["cpu_seconds"] for r in recv)
delivered_gb = hosts * nbytes / 1e9
out = {
    "hosts": hosts, "rate": rate, "files": files, "bytes": nbytes,
    "hmcast_s": int(t_h) / 1e9, "unicast_s": int(t_u) / 1e9, "sequential_s": int(t_s) / 1e9,
    "hmcast_over_unicast": int(t_h) / int(t_u), "hmcast_over_sequential": int(t_h) / int(t_s),
    "trees_identical": {"hmcast": int(ok_h), "unicast": int(ok_u), "sequential": int(ok_s)},
    "hmcast_verified_by_checksums": send["verified"], "hmcast_ok": send["ok"],
    # The source's own clock: joined to last byte at every receiver, and to their verdicts.
    "hmcast_data_s": send["seconds"], "hmcast_verdicts_s": send["seconds_with_verdicts"],
    "hmcast_cpu_s_per_gb_delivered": cpu / delivered_gb,
    "receivers_ok": sum(1 for r in recv if r["ok"]),
}
print(json.dumps(out))
PY
)
echo "$result"
[ -n "$OUT" ] && echo "$result" > "$OUT"
[ "$ok_hmcast" = "$HOSTS" ] && [ "$ok_seq" = "$HOSTS" ] && [ "$ok_unicast" = 1 ]
