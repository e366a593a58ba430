#!/usr/bin/env bash
# `hmcast cp` end to end on loopback, with real processes:
#   1. a mixed tree (empty and 1-byte files, small and large ones, an empty and a
#      nested directory, a file mode) to 3 receivers: identical at each;
#   2. a receiver SIGKILLed mid-way (in 1 MiB messages, so files span several):
#      the source says which and fails, the others still get every file;
#   3. a receiver whose disk fills up (a 2 MiB tmpfs in its own mount namespace;
#      needs root, which CI has): the source names the error, the others complete;
#   4. the source SIGKILLed mid-way: receivers fail, saying so, and leave no
#      temporary file behind;
#   5. a path that does not exist: a clear error before anything starts.
# Fails (exit 1) naming the first check that does not hold.
#   tests/cp/run.sh PATH/TO/hmcast
set -euo pipefail
H="$(realpath "${1:?usage: tests/cp/run.sh PATH/TO/hmcast}")"
T="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; exit 1; }
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
json_field() { /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())[sys.argv[1]])' "$1"; }
same_tree() {  # same_tree SRC DST: every file and directory, their bytes and modes
  diff -r "$1" "$2" >/dev/null || return 1
  [ "$(cd "$1" && find . -printf '%p %m %s\n' | sort)" = "$(cd "$2" && find . -printf '%p %m %s\n' | sort)" ]
}

mkdir -p "$T/src/tree/sub/deeper" "$T/src/tree/empty"
( cd "$T/src/tree"
  : > zero
  head -c 1 /dev/urandom > one
  head -c 5000 /dev/urandom > sub/small
  chmod 640 sub/small
  head -c 3000001 /dev/urandom > sub/three_mb
  head -c 20000003 /dev/urandom > sub/deeper/twenty )
chmod 750 "$T/src/tree/sub/deeper"

echo "--- 1. a mixed tree to 3 receivers (one message holds every file)"
out=$("$H" cp --spawn 3 --into "$T/ok{i}" --json --quiet "$T/src/tree")
[ "$(echo "$out" | json_field verified)" = 3 ] || fail "1: not every receiver verified: $out"
for i in 1 2 3; do same_tree "$T/src/tree" "$T/ok$i/tree" || fail "1: receiver $i's tree differs"; done
echo "3 of 3 receivers hold identical trees (5 files, 4 directories, modes kept)"

echo "--- 2. a receiver SIGKILLed after writing 4 MiB (1 MiB messages: files span several)"
set +e
out=$("$H" cp --spawn 3 --into "$T/kill{i}" --crash-after 4MiB --chunk 1MiB --json --quiet "$T/src/tree" 2>"$T/kill.err")
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "2: the source exited 0 though a receiver died"
grep -q "failed: left the group before it reported" "$T/kill.err" || fail "2: no clear error: $(cat "$T/kill.err")"
[ "$(echo "$out" | json_field verified)" = 2 ] || fail "2: survivors did not verify: $out"
for i in 1 2; do same_tree "$T/src/tree" "$T/kill$i/tree" || fail "2: survivor $i's tree differs"; done
echo "source: $(grep 'failed' "$T/kill.err")"
echo "2 survivors hold identical trees"

if [ "$(id -u)" -eq 0 ]; then
  echo "--- 3. a receiver's disk fills up"
  port=$(free_port)
  common=(--group full --manager "127.0.0.1:$port" --size 4 --join-timeout 60)
  for i in 1 2; do "$H" cp --receive "${common[@]}" --quiet --into "$T/full$i" & pids+=($!); done
  mkdir -p "$T/small_disk"
  unshare -m sh -c "mount -t tmpfs -o size=2m none '$T/small_disk' && exec '$H' cp --receive --group full --manager 127.0.0.1:$port --size 4 --join-timeout 60 --into '$T/small_disk/x'" 2>"$T/full3.err" & pids+=($!)
  set +e
  "$H" cp "${common[@]}" --embed-manager --quiet "$T/src/tree" 2>"$T/full.err"
  rc=$?
  set -e
  wait "${pids[@]}" 2>/dev/null || true
  pids=()
  [ "$rc" -ne 0 ] || fail "3: the source exited 0 though a disk was full"
  grep -q "No space left on device" "$T/full.err" || fail "3: the source did not name the error: $(cat "$T/full.err")"
  grep -q "No space left on device" "$T/full3.err" || fail "3: the receiver did not name the error: $(cat "$T/full3.err")"
  for i in 1 2; do same_tree "$T/src/tree" "$T/full$i/tree" || fail "3: receiver $i's tree differs"; done
  echo "source: $(grep 'failed' "$T/full.err")"
  echo "2 other receivers hold identical trees"
else
  echo "--- 3. skipped: a small disk needs root (mount namespace and tmpfs)"
fi

echo "--- 4. the source SIGKILLed after sending 10 MiB"
port=$(free_port)
"$H" manager --listen "127.0.0.1:$port" --exit-after 120 >/dev/null & pids+=($!)
mgr=$!
common=(--group gone --manager "127.0.0.1:$port" --size 3 --join-timeout 60)
recv=()
for i in 1 2; do "$H" cp --receive "${common[@]}" --into "$T/gone$i" 2>"$T/gone$i.err" & recv+=($!); pids+=($!); done
set +e
"$H" cp "${common[@]}" --quiet --crash-after 10MiB --chunk 1MiB "$T/src/tree"
src_rc=$?
rcs=()
for p in "${recv[@]}"; do wait "$p"; rcs+=($?); done
set -e
kill "$mgr" 2>/dev/null || true
[ "$src_rc" -eq 137 ] || fail "4: the source was not killed (exit $src_rc)"
for i in 1 2; do
  [ "${rcs[$((i-1))]}" -ne 0 ] || fail "4: receiver $i exited 0 without the whole tree"
  grep -q "left before the transfer ended" "$T/gone$i.err" || fail "4: receiver $i did not say why: $(cat "$T/gone$i.err")"
  [ -z "$(find "$T/gone$i" -name '*.part')" ] || fail "4: receiver $i left temporary files: $(find "$T/gone$i" -name '*.part')"
done
echo "receivers: $(head -1 "$T/gone1.err")"
echo "no temporary file left behind"

echo "--- 5. a path that does not exist"
set +e
err=$("$H" cp --spawn 1 --into "$T/none{i}" "$T/no/such/path" 2>&1)
rc=$?
set -e
[ "$rc" -ne 0 ] && echo "$err" | grep -q "no such file or directory" || fail "5: no clear error (exit $rc): $err"
echo "$err"
echo "all hmcast cp checks passed"
