#!/usr/bin/env python3
"""Members that leave while others still send, as a new user tried it: 6 `hmcast
member` processes, 3 senders of 20,000 messages of 2 KiB, the non-senders' stdin
closed early, so they leave mid-traffic. Run with a sanitizer build's tool: every
process must exit 0 within the time limit, and no sanitizer may report anything
(a callback reading the member's ledger after it was destroyed was such a report).

  tests/member_leave.py --tool build-asan/bin/hmcast [--runs 20] [--seed 1]

Prints one line per run, then a JSON summary; exits 1 on any failure.
"""
import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer",
           "hmcast: assertion failed")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(tool, run, rng, limit_s):
    port = free_port()
    manager = f"127.0.0.1:{port}"
    logs = tempfile.mkdtemp(prefix=f"hmcast-leave-{run}-")
    env = dict(os.environ, ASAN_OPTIONS="halt_on_error=1:detect_leaks=1", UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    procs = []
    outs = []
    mgr_err = open(os.path.join(logs, "manager.err"), "w")
    mgr = subprocess.Popen([tool, "manager", "--listen", manager], stdout=subprocess.DEVNULL, stderr=mgr_err, env=env)
    try:
        for i in range(6):
            err = open(os.path.join(logs, f"member{i}.err"), "w")
            out = open(os.path.join(logs, f"member{i}.out"), "w")
            p = subprocess.Popen([tool, "member", "--manager", manager, "--group", "leave", "--size", "6",
                                  "--senders", "3", "--messages", "20000", "--sizes", "2KiB",
                                  "--seed", str(run), "--timeout", str(limit_s)],
                                 stdin=subprocess.PIPE, stdout=out, stderr=err, env=env)
            outs.append(out)
            procs.append((p, err))
        # Members 4..6 (ids are given in join order: the non-senders, mostly) leave at
        # random moments while the senders are still sending.
        time.sleep(0.3 + 1.2 * rng.random())
        for p, _ in procs[3:]:
            p.stdin.close()
            time.sleep(0.2 * rng.random())
        deadline = time.time() + limit_s
        for p, _ in procs[3:]:
            p.wait(timeout=max(1, deadline - time.time()))
        for p, _ in procs[:3]:
            p.stdin.close()
            p.wait(timeout=max(1, deadline - time.time()))
        codes = [p.returncode for p, _ in procs]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for p, err in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            err.close()
        mgr.terminate()
        mgr.wait()
        mgr_err.close()
        for o in outs:
            o.close()
    # Who left before it had everything: the point of the run is that some did.
    left_early = 0
    for i in range(6):
        with open(os.path.join(logs, f"member{i}.out")) as f:
            for line in f:
                if '"event":"done"' in line.replace(" ", ""):
                    d = json.loads(line)
                    if d.get("delivered", 0) < d.get("expected", 0):
                        left_early += 1
    reports = []
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), errors="replace") as f:
            text = f.read()
        for r in REPORTS:
            if r in text:
                reports.append(f"{name}: {r}")
    return codes, reports, logs, left_early


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", default="build-asan/bin/hmcast")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=int, default=120, help="seconds a run may take")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    failures = 0
    mid_traffic = 0
    for run in range(1, a.runs + 1):
        t0 = time.time()
        codes, reports, logs, left_early = one_run(a.tool, run, rng, a.limit)
        ok = codes is not None and all(c == 0 for c in codes) and not reports
        failures += 0 if ok else 1
        mid_traffic += 1 if left_early > 0 else 0
        print(f"run {run}: {'ok' if ok else 'FAILED'} in {time.time() - t0:.1f} s, exit codes {codes}, "
              f"left before having everything: {left_early}, reports {reports}{'' if ok else ', logs in ' + logs}",
              flush=True)
        if ok:
            # A passing run's logs say nothing; a failing run's stay for whoever reads the line above.
            shutil.rmtree(logs, ignore_errors=True)
    print(json.dumps({"runs": a.runs, "failures": failures, "runs_with_members_leaving_mid_traffic": mid_traffic,
                      "tool": a.tool}))
    return 1 if failures else 0


sys.exit(main())
