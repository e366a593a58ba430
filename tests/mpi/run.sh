#!/usr/bin/env bash
# Runs the byte-checking MPI program (tests/mpi/bcast_check.cpp) under Open MPI's
# mpirun on loopback TCP, with 2, 4 and 8 processes, without the shim and with it
# (LD_PRELOAD=build/lib/libhmcast_mpi.so), plus three runs of the shim with a
# setting: HMCAST_MPI=off, HMCAST_MPI_MAX_GROUPS=1, injected datagram loss and
# reordering, one rank stopped for 400 ms (the root must wait for it), and an
# erroneous size mismatch that must come back as MPI_ERR_TRUNCATE. Valid degenerate calls
# are checked too: no bytes (count 0, a type of size 0), MPI_BOTTOM with absolute
# addresses, a type with holes and a negative lower bound.
# MPI_Ibcast is checked in every run of that program (completed by MPI_Wait, MPI_Waitall,
# MPI_Test, MPI_Waitany, MPI_Testall), and a Fortran program (tests/mpi/fortran_check.f90:
# `use mpi`, mpif.h, MPI_BCAST and MPI_IBCAST) runs with and without the shim.
# Every byte of every broadcast is checked at every rank.
#
# Prints one line per run, then as its last line one JSON object:
#   procs           most processes in a run with the shim
#   checks          checks made (every rank's, over all runs, plus this script's own)
#   failures        checks that failed (0 to pass)
#   hmcast_calls    MPI_Bcast calls that went through hmcast, summed over ranks and runs
#   fallback_calls  MPI_Bcast calls the shim passed to PMPI_Bcast, summed likewise
#   nonblocking_calls  of hmcast_calls, MPI_Ibcast calls
#   fortran_hmcast_calls  of hmcast_calls, those of the Fortran program
#   runs            each run's figures
# Exits 0 only if failures == 0 and hmcast_calls, nonblocking_calls and fortran_hmcast_calls > 0.
#
# Options: --build DIR (default build), --max-bytes N (largest broadcast, default 64 MiB),
# --sanitizer asan|tsan: use the shim of a sanitizer build (--build build-asan or
# build-tsan), its runtime preloaded with it, in a shorter set of runs (4 processes,
# 8 MiB at most) with the sanitizer halting on its first report. The check program
# is always the default build's: only the shim is under the sanitizer.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=build
MAX_BYTES=""
SANITIZER=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2;;
    --max-bytes) MAX_BYTES="$2"; shift 2;;
    --sanitizer) SANITIZER="$2"; shift 2;;
    *) echo "usage: $0 [--build DIR] [--max-bytes N] [--sanitizer asan|tsan]" >&2; exit 2;;
  esac
done
CHECK="build/bin/hmcast_mpi_check"
FORTRAN_CHECK="build/bin/hmcast_mpi_fortran_check"
SHIM="$PWD/$BUILD/lib/libhmcast_mpi.so"
for f in "$CHECK" "$FORTRAN_CHECK" "$SHIM"; do
  [ -e "$f" ] || { echo "missing $f: build it first (cmake --build --preset default --target hmcast_mpi hmcast_mpi_check hmcast_mpi_fortran_check; the Fortran one needs gfortran)" >&2; exit 2; }
done
PRELOAD="$SHIM"
SANITIZER_ENV=()
case "$SANITIZER" in
  "") MAX_BYTES=${MAX_BYTES:-$((64 << 20))};;
  asan) PRELOAD="$(g++ -print-file-name=libasan.so) $SHIM"
        SANITIZER_ENV=(-x ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 -x UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
        MAX_BYTES=${MAX_BYTES:-$((8 << 20))};;
  tsan) PRELOAD="$(g++ -print-file-name=libtsan.so) $SHIM"
        SANITIZER_ENV=(-x TSAN_OPTIONS=halt_on_error=1)
        MAX_BYTES=${MAX_BYTES:-$((8 << 20))};;
  *) echo "--sanitizer takes asan or tsan" >&2; exit 2;;
esac
command -v mpirun >/dev/null || { echo "mpirun not found: run scripts/install-deps.sh (openmpi-bin)" >&2; exit 2; }

# Loopback TCP only; more processes than cores; root needs the explicit permission.
MPIRUN=(mpirun --oversubscribe --mca btl self,tcp --mca pml ob1 --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"

run() {  # run <label> <procs> <shim: yes|no> [VAR=value ...]: one mpirun, its figures appended to $RESULTS
  local label="$1" np="$2" shim="$3"; shift 3
  local env=()
  if [ "$shim" = yes ]; then env+=(-x "LD_PRELOAD=$PRELOAD" -x HMCAST_MPI_STATS=1 "${SANITIZER_ENV[@]}"); fi
  for kv in "$@"; do env+=(-x "$kv"); done
  local rc=0
  local program=("$CHECK" --max-bytes "$MAX_BYTES")
  [ "${FORTRAN:-}" = yes ] && program=("$FORTRAN_CHECK")
  timeout 240 "${MPIRUN[@]}" -np "$np" "${env[@]}" "${program[@]}" ${PROGRAM_ARGS:-} \
    >"$WORK/out" 2>"$WORK/err" || rc=$?
  python3 - "$label" "$np" "$shim" "$rc" "$WORK/out" "$WORK/err" "$* ${PROGRAM_ARGS:-}" "${FORTRAN:-no}" >>"$RESULTS" <<'PY'
import json, sys
label, np, shim, rc, out_path, err_path, settings, fortran = sys.argv[1:]
fortran = fortran == "yes"
np, rc = int(np), int(rc)
out = open(out_path, errors="replace").read().splitlines()
err = open(err_path, errors="replace").read().splitlines()
r = {"run": label, "procs": np, "shim": shim == "yes", "fortran": fortran, "settings": settings, "exit": rc,
     "checks": 0, "failures": 0, "calls": 0, "seconds": None, "script_failures": []}
try:
    prog = json.loads(out[-1])
    r.update(checks=prog["checks"], failures=prog["failures"], calls=prog["calls"], seconds=prog["seconds"],
             root_wait_ms=prog["root_wait_ms"])
except (IndexError, ValueError, KeyError):
    r["script_failures"].append("no JSON line from the program (exit %d; timeout is 124)" % rc)
if rc != 0:
    r["script_failures"].append("mpirun exited %d" % rc)
stats = [json.loads(l.split("hmcast_mpi stats: ", 1)[1]) for l in err if "hmcast_mpi stats: " in l]
r["stat_ranks"] = len(stats)
for k in ("hmcast_calls", "fallback_calls", "hmcast_large", "hmcast_packed", "fallback_disabled",
          "fallback_group_limit", "fallback_intercomm", "fallback_single_rank", "fallback_setup_failed",
          "repairs_sent", "faults_dropped", "hmcast_errors", "hmcast_nonblocking", "fortran_calls", "root_waits",
          "credits_sent", "bad_messages", "received_in_place", "received_copied", "sent_in_place",
          "nonblocking_in_place"):
    r[k] = sum(s[k] for s in stats)
r["max_queued_bytes"] = max((s["max_queued_bytes"] for s in stats), default=0)
if r["shim"]:
    if len(stats) != np:
        r["script_failures"].append("%d of %d ranks printed shim stats" % (len(stats), np))
    # Every MPI_Bcast the program made went one way or the other.
    counted = r["hmcast_calls"] + r["fallback_calls"] + r["hmcast_errors"]
    if counted != r["calls"]:
        r["script_failures"].append("shim counted %d calls, the program made %d" % (counted, r["calls"]))
    errors_expected = np - 1 if "--mismatch" in settings else 0  # each receiver of the short buffer
    if r["hmcast_errors"] != errors_expected:
        r["script_failures"].append("%d calls failed in the shim, expected %d" % (r["hmcast_errors"], errors_expected))
    if "HMCAST_MPI=off" in settings:
        if r["hmcast_calls"] != 0 or r["fallback_disabled"] != r["calls"]:
            r["script_failures"].append("HMCAST_MPI=off did not send every call to PMPI_Bcast")
    else:
        if r["hmcast_calls"] == 0: r["script_failures"].append("no call went through hmcast")
        plain_suite = all(a not in settings for a in ("--mismatch", "--stall", "--run-ahead"))
        if r["fallback_intercomm"] == 0 and plain_suite and not fortran:
            r["script_failures"].append("the inter-communicator did not fall back")
        if r["hmcast_nonblocking"] == 0 and plain_suite:
            r["script_failures"].append("no MPI_Ibcast went through hmcast")
        # Receivers lend their buffer before a large broadcast is announced: with
        # the program's barriers between calls, most land there without a copy.
        if plain_suite and not fortran and r["received_in_place"] == 0:
            r["script_failures"].append("no large MPI_Bcast was received straight into the user's buffer (%d copied)" % r["received_copied"])
        # Roots send large contiguous broadcasts from the user's buffer, blocking or not,
        # and MPI_Ibcast's receivers lend theirs as MPI_Bcast's do.
        if plain_suite and not fortran and r["sent_in_place"] == 0:
            r["script_failures"].append("no large broadcast was sent from the root's buffer")
        if plain_suite and not fortran and r["nonblocking_in_place"] == 0:
            r["script_failures"].append("no large MPI_Ibcast was sent from or received into the user's buffer")
        if r["fallback_setup_failed"] != 0: r["script_failures"].append("a group could not be formed")
    # Fortran's calls reach the shim through its Fortran entry points, every one of them.
    if fortran and r["fortran_calls"] != r["calls"]:
        r["script_failures"].append("the shim saw %d Fortran calls, the program made %d" % (r["fortran_calls"], r["calls"]))
    if not fortran and r["fortran_calls"] != 0:
        r["script_failures"].append("Fortran calls counted in a C program")
    if r["bad_messages"] != 0:
        r["script_failures"].append("%d messages were neither data nor credit" % r["bad_messages"])
    # Flow control: 200 x 64 KiB while the receivers sleep. Bounded at 1 MiB, a rank
    # holds at most the bound plus the message at hand, and the root waited; with
    # no bound the backlog grows past it (the check above can fail).
    if "--run-ahead" in settings and "HMCAST_MPI_QUEUE_BYTES=1048576" in settings:
        if r["root_waits"] == 0 or r["credits_sent"] == 0:
            r["script_failures"].append("the root never waited for credit (root_waits %d, credits %d)" % (r["root_waits"], r["credits_sent"]))
        if r["max_queued_bytes"] > (1 << 20) + (64 << 10):
            r["script_failures"].append("a rank held %d bytes, over the 1 MiB bound plus one message" % r["max_queued_bytes"])
    if "--run-ahead" in settings and "HMCAST_MPI_QUEUE_BYTES=0" in settings:
        if r["root_waits"] != 0 or r["max_queued_bytes"] <= (1 << 20) + (64 << 10):
            r["script_failures"].append("unbounded, the backlog stayed at %d bytes (root_waits %d): the bounded run shows nothing" % (r["max_queued_bytes"], r["root_waits"]))
    if "HMCAST_MPI_MAX_GROUPS=1" in settings and r["fallback_group_limit"] == 0:
        r["script_failures"].append("HMCAST_MPI_MAX_GROUPS=1 did not bound the groups")
    if "HMCAST_FAULT_LOSS" in settings and (r["faults_dropped"] == 0 or r["repairs_sent"] == 0):
        r["script_failures"].append("the fault layer dropped nothing, or nothing was repaired")
elif stats:
    r["script_failures"].append("shim stats printed in a run without the shim")
for l in err:
    if l.startswith("FAIL") or ("hmcast_mpi: rank" in l and "--mismatch" not in settings):
        sys.stderr.write("  " + l + "\n")
print(json.dumps(r))
PY
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%-26s procs=%d checks=%d failures=%d hmcast_calls=%d (ibcast %d) fallback_calls=%d dropped=%d repairs=%d seconds=%s root_wait_ms=%s max_queued=%d root_waits=%d in_place=%d copied=%d sent_in_place=%d ibcast_in_place=%d %s" % (r["run"], r["procs"], r["checks"], r["failures"], r["hmcast_calls"], r["hmcast_nonblocking"], r["fallback_calls"], r["faults_dropped"], r["repairs_sent"], r["seconds"], r.get("root_wait_ms"), r["max_queued_bytes"], r["root_waits"], r.get("received_in_place", 0), r.get("received_copied", 0), r.get("sent_in_place", 0), r.get("nonblocking_in_place", 0), "; ".join(r["script_failures"]) or "ok"))' "$(tail -n 1 "$RESULTS")"
}

if [ -z "$SANITIZER" ]; then
  # Each also checks the allocator: tuned by the shim (HMCAST_MPI_MALLOPT), left alone without it.
  for np in 2 4 8; do
    PROGRAM_ARGS="--heap-kept 0" run "mpi-only" "$np" no
    PROGRAM_ARGS="--heap-kept 1" run "shim" "$np" yes
  done
  PROGRAM_ARGS="--heap-kept 0" run "shim HMCAST_MPI_MALLOPT=0" 2 yes HMCAST_MPI_MALLOPT=0
  run "shim HMCAST_MPI=off" 4 yes HMCAST_MPI=off
  run "shim max 1 group" 4 yes HMCAST_MPI_MAX_GROUPS=1
  # The root returns only once every rank holds the data: the last rank stops itself
  # (SIGSTOP) for 400 ms, the root broadcasts 1 KiB 200 ms into it. Plain MPI
  # returns at once (figure recorded, not judged); the shim must wait >= 100 ms.
  PROGRAM_ARGS="--stall 400" run "mpi-only one rank stopped" 4 no
  PROGRAM_ARGS="--stall 400 --expect-root-wait-ms 100" run "shim one rank stopped" 4 yes
  FORTRAN=yes run "mpi-only fortran" 4 no
  FORTRAN=yes run "shim fortran" 4 yes
else
  run "shim ($SANITIZER)" 4 yes
  FORTRAN=yes run "shim fortran ($SANITIZER)" 4 yes
fi
run "shim loss+reorder" 4 yes HMCAST_FAULT_LOSS=0.02 HMCAST_FAULT_REORDER=0.05 HMCAST_FAULT_SEED=7
# A root that runs ahead of ranks busy elsewhere: held back by a 1 MiB bound, and
# (to show what the bound prevents) not held back with none.
PROGRAM_ARGS="--run-ahead 200" run "shim root runs ahead, bound" 4 yes HMCAST_MPI_QUEUE_BYTES=1048576
PROGRAM_ARGS="--run-ahead 200" run "shim root runs ahead, none" 4 yes HMCAST_MPI_QUEUE_BYTES=0 HMCAST_MPI_QUEUE_MESSAGES=0
# Erroneous program: the root sends more bytes than the others expect. Each receiver
# must get MPI_ERR_TRUNCATE (MPI_ERRORS_RETURN), and the communicator keep working.
PROGRAM_ARGS=--mismatch run "shim size mismatch" 4 yes

python3 - "$RESULTS" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
script_checks = sum(1 + 3 * r["shim"] for r in runs)  # exit/JSON per run; stats, call sums, path per shim run
summary = {
    "procs": max(r["procs"] for r in runs if r["shim"]),
    "checks": sum(r["checks"] for r in runs) + script_checks,
    "failures": sum(r["failures"] + len(r["script_failures"]) for r in runs),
    "hmcast_calls": sum(r["hmcast_calls"] for r in runs),
    "fallback_calls": sum(r["fallback_calls"] for r in runs),
    "nonblocking_calls": sum(r["hmcast_nonblocking"] for r in runs),
    "fortran_hmcast_calls": sum(r["hmcast_calls"] for r in runs if r["fortran"]),
    "max_queued_bytes_bounded": max((r["max_queued_bytes"] for r in runs if "HMCAST_MPI_QUEUE_BYTES=1048576" in r["settings"]), default=0),
    "max_queued_bytes_unbounded": max((r["max_queued_bytes"] for r in runs if "HMCAST_MPI_QUEUE_BYTES=0" in r["settings"]), default=0),
    "runs": [{k: r.get(k) for k in ("run", "procs", "checks", "failures", "hmcast_calls", "fallback_calls", "seconds",
                                    "root_wait_ms", "max_queued_bytes", "root_waits")} for r in runs],
}
print(json.dumps(summary))
ok = summary["failures"] == 0 and all(summary[k] > 0 for k in ("hmcast_calls", "nonblocking_calls", "fortran_hmcast_calls"))
sys.exit(0 if ok else 1)
PY
