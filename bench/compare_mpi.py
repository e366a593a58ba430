#!/usr/bin/env python3
"""hmcast against Open MPI side by side, in one run (see bench/compare_mpi.sh).

Small messages, loopback, real processes: `hmcast bench` (socket transport) and
`hmcast_mpi_bench` under mpirun (TCP BTL on lo only), and the same MPI program
under LD_PRELOAD=build/lib/libhmcast_mpi.so when that shim is built. Compared:
  hmcast all-acked (the sender knows every member has it)  vs  MPI_Bcast + MPI_Barrier
  hmcast last delivery (the last member has it)            vs  MPI_Bcast alone
Each pair runs one after the other, alternating, `rounds` times; the medians of
the rounds' p50s are compared.

Large messages, the emulated cluster (tests/cluster/cluster.sh: namespaces, a
bridge, tbf at a fixed per-host rate): 64 MiB to 8 hosts with the binomial
pipeline, chain, binomial tree and sequential schedules, against one unicast of
64 MiB between two hosts over the same links (a plain TCP stream), and
MPI_Bcast across the namespaces where mpirun can start there.

Two hosts (--two-host, and with --docs): 2 namespaces of 4 processes each at 1 Gbit/s,
2 KiB and 64 MiB, hmcast's members all on the socket transport against Open MPI with
shared memory inside a namespace and TCP between (issue 18).

Verbs (--verbs, and with --docs): in the Soft-RoCE VM (tests/rxe/run.sh, suite
verbs_vs_ucx, bench/verbs_vs_ucx.py), hmcast on the verbs transport against
Open MPI over UCX on the same rxe device, 4 processes; ratios only (emulation).

Writes CSV, summary.json, PNG charts and results.md to --out; with --docs also the
charts to docs/benchmarks/ and the tables into docs/benchmarks.md. The last line
printed is the summary JSON.
"""
import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HM = os.path.join(ROOT, "build/bin/hmcast")
MPIB = os.path.join(ROOT, "build/bin/hmcast_mpi_bench")
SHIM = os.path.join(ROOT, "build/lib/libhmcast_mpi.so")
CLUSTER = os.path.join(ROOT, "tests/cluster/cluster.sh")
RSH = os.path.join(ROOT, "bench/netns_rsh.sh")
UNICAST = os.path.join(ROOT, "bench/unicast.py")
RXE = os.path.join(ROOT, "tests/rxe/run.sh")
def mpirun_btl(btl):
    """mpirun with Open MPI's ob1 and the byte transfer layers `btl`."""
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", btl]


MPIRUN = mpirun_btl("self,tcp")
# Open MPI's shared memory on one host (the baseline of the shm transport).
MPIRUN_VADER = mpirun_btl("self,vader")
MPIRUN_LO = MPIRUN + ["--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
MIB = 1 << 20
LOG = []


def say(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, timeout, env=None):
    """Runs cmd, returns its stdout; logs the command. Raises on failure or timeout."""
    LOG.append(" ".join(cmd))
    say("$ " + " ".join(cmd))
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout, env=full_env)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (cmd[0], p.returncode, (p.stderr or p.stdout)[-800:]))
    return p.stdout


def last_json(out):
    lines = [l for l in out.strip().splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError("no JSON line in output: " + out[-400:])
    return json.loads(lines[-1])


def fmt_size(n):
    for unit, f in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1024)):
        if n >= f and n % f == 0:
            return "%d %s" % (n // f, unit)
    return "%d B" % n


def fmt_cpu(c):
    """CPU seconds per GB delivered, or n/a."""
    if c is None:
        return "n/a"
    return "%.0f" % c if c >= 100 else "%.2f" % c


def fmt_us(us):
    if us is None:
        return "n/a"
    return "%.2f s" % (us / 1e6) if us >= 1e6 else "%.1f ms" % (us / 1e3) if us >= 1e4 else "%.0f µs" % us


# ---------------------------------------------------------------- small messages (loopback)

def hmcast_small(procs, sizes, messages=None, extra=(), transport="socket", env=None):
    cmd = [HM, "bench", "--transport", transport, "--procs", str(procs), "--sizes", ",".join(map(str, sizes)),
           "--latency-only", "--json"] + list(extra)
    if messages:
        cmd += ["--messages", str(messages)]
    rows = last_json(run(cmd, 900, env))["rows"]
    return {r["size"]: {"all": r["complete_p50_us"], "all_p99": r["complete_p99_us"], "last": r["deliver_p50_us"],
                        "last_p99": r["deliver_p99_us"], "ok": r["ok"], "policy": r.get("policy", {}),
                        "cpu": r.get("latency_cpu_s_per_gb")} for r in rows}


def mpi_small(procs, sizes, scale, shim=False, prefix=None):
    cmd = (prefix or MPIRUN_LO) + ["-np", str(procs)]
    if shim:
        cmd += ["-x", "LD_PRELOAD=" + SHIM]
    cmd += [MPIB, "--sizes", ",".join(map(str, sizes)), "--scale", str(scale), "--json"]
    if shim:
        cmd += ["--label", "MPI_Bcast via hmcast shim"]
    rows = last_json(run(cmd, 900))["rows"]
    return {r["size"]: {"all": r["bcast_barrier_p50_us"], "all_p99": r["bcast_barrier_p99_us"],
                        "last": r["bcast_p50_us"], "last_p99": r["bcast_p99_us"], "ok": r["ok"],
                        "cpu": r.get("cpu_s_per_gb")} for r in rows}


IMPLS = [("hmcast", "hmcast (socket)"), ("mpi", "Open MPI MPI_Bcast (TCP)"), ("shim", "MPI_Bcast via hmcast shim")]


def latency_row(impl, procs, size, rnd, r):
    """One row of a latency grid from hmcast_small()'s or mpi_small()'s result `r`."""
    return {"impl": impl, "procs": procs, "size": size, "round": rnd, "all_p50_us": r["all"],
            "last_p50_us": r["last"], "all_p99_us": r["all_p99"], "last_p99_us": r["last_p99"],
            "ok": r["ok"], "policy": json.dumps(r.get("policy", {})), "cpu_s_per_gb": r.get("cpu")}


def small_runs(procs_list, sizes, rounds, scale, shim):
    """rows: impl, procs, size, round, all_p50_us, last_p50_us, all_p99_us, last_p99_us, ok"""
    rows = []
    for procs in procs_list:
        for rnd in range(rounds):
            got = {"hmcast": hmcast_small(procs, sizes, None if scale >= 1 else None),
                   "mpi": mpi_small(procs, sizes, scale)}
            if shim:
                try:
                    got["shim"] = mpi_small(procs, sizes, scale, shim=True)
                except Exception as e:  # the shim is another issue's work: report, do not stop
                    say("shim run failed: %s" % e)
            for impl, res in got.items():
                rows += [latency_row(impl, procs, size, rnd, r) for size, r in res.items()]
    return rows


def shm_runs(procs_list, sizes):
    """One host, shared memory on both sides: hmcast's shm transport against Open MPI's
    vader BTL. rows as small_runs() with impl "hmcast_shm" and "mpi_vader"."""
    rows = []
    for procs in procs_list:
        got = {"hmcast_shm": hmcast_small(procs, sizes, transport="shm"),
               "mpi_vader": mpi_small(procs, sizes, 1.0, prefix=MPIRUN_VADER)}
        for impl, res in got.items():
            rows += [latency_row(impl, procs, size, 0, r) for size, r in res.items()]
    return rows


CALLER_SIZES = [8, 2048, 65536]


def caller_runs(procs_list, sizes):
    """hmcast with Config::progress = caller (no progress thread: the application's
    calls make progress, as MPI ranks do), small messages, on loopback sockets and on
    shm. rows as small_runs() with impl "hmcast_caller" and "hmcast_shm_caller"."""
    rows = []
    for procs in procs_list:
        for impl, transport in (("hmcast_caller", "socket"), ("hmcast_shm_caller", "shm")):
            res = hmcast_small(procs, sizes, extra=["--progress", "caller"], transport=transport)
            rows += [latency_row(impl, procs, size, 0, r) for size, r in res.items()]
    return rows


def caller_table(rows, procs_list, sizes):
    md = ["\n### Progress in the caller's thread (`--progress caller`), small messages, p50 until every member has it\n",
          "hmcast with `Config::progress = Progress::caller` (no progress thread; the application's calls make "
          "progress) beside the default progress thread, against Open MPI's MPI_Bcast + MPI_Barrier: over TCP "
          "for the socket transport, `--mca btl self,vader` for shm (the MPI figures are the tables' above).\n",
          "| procs | size | socket, thread | socket, caller | MPI TCP | caller / MPI | shm, thread | shm, caller | "
          "MPI vader | caller / vader | CPU s/GB: socket caller, MPI TCP, shm caller, MPI vader |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for procs in procs_list:
        for size in sizes:
            v = [median_of(rows, impl, procs, size, "all_p50_us")
                 for impl in ("hmcast", "hmcast_caller", "mpi", "hmcast_shm", "hmcast_shm_caller", "mpi_vader")]
            cells = [fmt_us(x) if x else "n/a" for x in v]
            r1 = "%.2f" % (v[1] / v[2]) if v[1] and v[2] else "n/a"
            r2 = "%.2f" % (v[4] / v[5]) if v[4] and v[5] else "n/a"
            cpu = ", ".join(fmt_cpu(median_of(rows, impl, procs, size, "cpu_s_per_gb"))
                            for impl in ("hmcast_caller", "mpi", "hmcast_shm_caller", "mpi_vader"))
            md.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                procs, fmt_size(size), cells[0], cells[1], cells[2], r1, cells[3], cells[4], cells[5], r2, cpu))
    return "\n".join(md) + "\n"


def worst_cell(rows, a, b, procs_list, sizes):
    """(ratio, procs, size) of the cell where impl a's all-acked p50 is worst against b's."""
    worst = None
    for procs in procs_list:
        for size in sizes:
            h, m = median_of(rows, a, procs, size, "all_p50_us"), median_of(rows, b, procs, size, "all_p50_us")
            if h and m and (worst is None or h / m > worst[0]):
                worst = (h / m, procs, size)
    return worst


# ---------------------------------------------------------------- streaming (loopback)

STREAM_SIZES = [64, 2048, 65536]
STREAM_PROCS = 8
STREAM_SCALE = 4  # 20,000 small messages (800 of 64 KiB), as ../shared/notes/mpi-baseline.md
# Alternated rounds of each stream, their medians compared: a 64 B stream's span is
# 20-80 ms, and one run of each side read 2.6x to 9.6x within an hour on one host.
STREAM_ROUNDS = 3


def stream_runs(rounds, transport="socket", mpirun=None, sizes=None, impls=("hmcast", "mpi")):
    """One sender streams to 8 members, then knows all have the last message: hmcast's
    stream until its last completion, against MPI_Bcast back to back then one MPI_Barrier.
    `transport` and `mpirun` pick the media (loopback sockets and TCP; shm and vader).
    rows: impl, size, round, msgs_per_s, mb_s, cpu_s_per_gb, ok"""
    rows = []
    sizes = ",".join(map(str, sizes or STREAM_SIZES))
    for rnd in range(rounds):
        out = run([HM, "bench", "--transport", transport, "--procs", str(STREAM_PROCS), "--sizes", sizes,
                   "--throughput-only", "--scale", str(STREAM_SCALE), "--json"], 900)
        for r in last_json(out)["rows"]:
            rows.append({"impl": impls[0], "size": r["size"], "round": rnd, "msgs_per_s": r["stream_msgs_per_s"],
                         "mb_s": r["stream_msgs_per_s"] * r["size"] / 1e6,
                         "cpu_s_per_gb": r["throughput_cpu_s_per_gb"], "ok": r["ok"]})
        out = run((mpirun or MPIRUN_LO) + ["-np", str(STREAM_PROCS), MPIB, "--sizes", sizes, "--stream", "--scale",
                                           str(STREAM_SCALE), "--json"], 900)
        for r in last_json(out)["rows"]:
            rows.append({"impl": impls[1], "size": r["size"], "round": rnd, "msgs_per_s": r["stream_msgs_per_s"],
                         "mb_s": r["stream_msgs_per_s"] * r["size"] / 1e6, "cpu_s_per_gb": r.get("cpu_s_per_gb"),
                         "ok": r["ok"]})
    return rows


# One host, shared memory on both sides (issue 18): 64 B and 2 KiB streams.
SHM_STREAM_SIZES = [64, 2048]


def stream_median(rows, impl, size, key="msgs_per_s"):
    v = [r[key] for r in rows if r["impl"] == impl and r["size"] == size and r[key] is not None]
    return statistics.median(v) if v else None


def stream_summary(summary, rows, prefix, impls, mpi_key, sizes):
    """The JSON figures of one set of stream runs: messages/s both ways, the ratio, CPU per GB."""
    for size in sizes:
        name = {64: "64b", 2048: "2k", 65536: "64k"}[size]
        h, m = stream_median(rows, impls[0], size), stream_median(rows, impls[1], size)
        summary["%s_%s_hmcast_msgs_per_s" % (prefix, name)] = round(h) if h else None
        summary["%s_%s_%s_msgs_per_s" % (prefix, name, mpi_key)] = round(m) if m else None
        summary["%s_%s_ratio_vs_%s" % (prefix, name, mpi_key)] = round(h / m, 3) if h and m else None
        c = stream_median(rows, impls[0], size, "cpu_s_per_gb")
        summary["%s_%s_hmcast_cpu_s_per_gb" % (prefix, name)] = round(c, 2) if c else None
        c = stream_median(rows, impls[1], size, "cpu_s_per_gb")
        summary["%s_%s_%s_cpu_s_per_gb" % (prefix, name, mpi_key)] = round(c, 2) if c else None


def median_of(rows, impl, procs, size, key):
    v = [r[key] for r in rows if r["impl"] == impl and r["procs"] == procs and r["size"] == size
         and r.get(key) is not None]
    return statistics.median(v) if v else None


# ---------------------------------------------------------------- large messages (emulated cluster)

def cluster_possible():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2 (ip, tc)"
    return None


def unicast_once(size):
    """One TCP stream of `size` bytes from hm1 to hm2: seconds from the sender's start to the last byte."""
    recv = subprocess.Popen(["ip", "netns", "exec", "hm2", sys.executable, UNICAST, "recv", "5201", str(size)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if recv.stdout.readline().strip() != "listening":
            raise RuntimeError("unicast receiver did not start: " + recv.stderr.read())
        start = int(run(["ip", "netns", "exec", "hm1", sys.executable, UNICAST, "send", "10.77.0.2", "5201", str(size)],
                        300).strip())
        arrival = int(recv.communicate(timeout=60)[0].strip())
        return (arrival - start) / 1e3
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()


def hmcast_cluster(procs, size, algo, messages, env=None):
    # Cold, as the one unicast it is compared with: no warm-up broadcasts (they would
    # also add a minute per sequential row).
    cmd = [HM, "bench", "--transport", "socket", "--procs", str(procs), "--sizes", str(size), "--latency-only",
           "--messages", str(messages), "--warmup", "0", "--algo", algo, "--json", "--prefix", "ip netns exec hm{i}",
           "--interface-template", "10.77.0.{i}", "--manager-host", "10.77.0.254"]
    r = last_json(run(cmd, 1200, env))["rows"][0]
    return {"last": r["deliver_p50_us"], "all": r["complete_p50_us"], "ok": r["ok"], "policy": r.get("policy", {}),
            "cpu": r.get("latency_cpu_s_per_gb")}


# mpirun on the emulated cluster: every namespace's daemon believes it has the machine's
# cores to itself, so by default it binds its ranks to the same cores as the other
# "hosts" and lets them spin without yielding; all share the 2 real CPUs. Measured
# 11-27 with 2 KiB: 2 ranks on 2 hosts 8.0 ms Bcast+Barrier p50 (every message a 4 ms
# scheduler tick) against 24.7 us unbound; 8 ranks on 2 hosts 43-48 ms against 151 us
# unbound and yielding, as mpirun does by itself when it sees the oversubscription.
MPIRUN_CLUSTER = ["--bind-to", "none", "--mca", "mpi_yield_when_idle", "1", "--mca", "plm_rsh_agent", RSH,
                  "--mca", "btl_tcp_if_include", "10.77.0.0/24", "--mca", "oob_tcp_if_include", "10.77.0.0/24"]


def mpi_cluster(procs, size, iters_scale):
    hosts = ",".join("10.77.0.%d" % i for i in range(1, procs + 1))
    prefix = MPIRUN + ["--host", hosts] + MPIRUN_CLUSTER
    return mpi_small(procs, [size], iters_scale, prefix=prefix)[size]


def key_env(out):
    """The environment that gives every member a group key (issue 21): a new key file in `out`."""
    path = os.path.join(out, "group.key")
    if os.path.exists(path):
        os.remove(path)
    run([HM, "keygen", "--out", path], 60)
    return {"HMCAST_KEY_FILE": path}


# Messages per 2 KiB run of auth_runs(). Between identical plain runs at 8 processes
# a run's p50 moved by 16% (standard deviation over mean) at 1,000 messages, 11% at
# 4,000 and 5.6% at 16,000 (2026-11-28): slow swings of the 2 cores' scheduling make
# neighbouring messages alike, so a run's p50 is only as steady as it is long.
AUTH_2K_MESSAGES = 16000


def auth_runs(rounds, keyed):
    """The group key's cost, plain and keyed alternated: 2 KiB all-acked latency at 8
    processes (`rounds` pairs of AUTH_2K_MESSAGES-message runs), then 64 MiB throughput
    at 4 processes on loopback, where the CPU and not a link is the limit (2 pairs). A
    pair runs its two modes in the order opposite to the pair before it, so whatever
    drifts along the sequence falls on both modes alike.
    rows: mode, what, round, value, cpu_s_per_gb."""
    def modes(rnd):
        pair = (("plain", None), ("keyed", keyed))
        return pair if rnd % 2 == 0 else pair[::-1]

    rows = []
    for rnd in range(rounds):
        for mode, env in modes(rnd):
            r = hmcast_small(8, [2048], messages=AUTH_2K_MESSAGES, env=env)[2048]
            rows.append({"mode": mode, "what": "2k_all_acked_p50_us", "round": rnd, "value": r["all"], "ok": r["ok"]})
    for rnd in range(2):
        for mode, env in modes(rnd):
            t = last_json(run([HM, "bench", "--transport", "socket", "--procs", "4", "--sizes", str(64 * MIB),
                               "--throughput-only", "--json"], 900, env))["rows"][0]
            rows.append({"mode": mode, "what": "64m_loopback_mb_s", "round": rnd, "value": t["throughput_mb_s"],
                         "cpu_s_per_gb": t["throughput_cpu_s_per_gb"], "ok": t["ok"]})
    return rows


def auth_median(rows, mode, what, key="value"):
    v = [r[key] for r in rows if r["mode"] == mode and r["what"] == what and r.get(key) is not None]
    return statistics.median(v) if v else None


def cluster_runs(rate, quick, hosts=8, size=64 * MIB, keyed=None):
    rows = []
    note = cluster_possible()
    if note:
        return rows, "skipped: the emulated cluster " + note
    run([CLUSTER, "up", str(hosts), rate], 120)
    try:
        for rep in range(2 if quick else 3):
            rows.append({"what": "unicast (one TCP stream, 2 hosts)", "key": "unicast", "rep": rep,
                         "last_us": unicast_once(size), "all_us": None, "ok": True})
        plan = [("binomial_pipeline", 3), ("sequential", 1)] if quick else \
            [("binomial_pipeline", 4), ("chain", 2), ("binomial_tree", 2), ("sequential", 2)]
        for algo, messages in plan:
            r = hmcast_cluster(hosts, size, algo, messages)
            rows.append({"what": "hmcast %s, %d hosts" % (algo, hosts), "key": algo, "rep": 0, "last_us": r["last"],
                         "all_us": r["all"], "ok": r["ok"], "cpu_s_per_gb": r.get("cpu")})
        if keyed:
            # The same as the first plan line, every frame tagged under a group key.
            r = hmcast_cluster(hosts, size, plan[0][0], plan[0][1], keyed)
            rows.append({"what": "hmcast %s, %d hosts, group key" % (plan[0][0], hosts), "key": plan[0][0] + "_keyed",
                         "rep": 0, "last_us": r["last"], "all_us": r["all"], "ok": r["ok"], "cpu_s_per_gb": r.get("cpu")})
        if not quick:
            r = hmcast_cluster(2, size, "binomial_pipeline", 3)
            rows.append({"what": "hmcast, 2 hosts (one hop)", "key": "hmcast_2", "rep": 0, "last_us": r["last"],
                         "all_us": r["all"], "ok": r["ok"], "cpu_s_per_gb": r.get("cpu")})
            try:
                r = mpi_cluster(hosts, size, 0.5)
                rows.append({"what": "Open MPI MPI_Bcast, %d hosts" % hosts, "key": "mpi_bcast", "rep": 0,
                             "last_us": r["last"], "all_us": r["all"], "ok": r["ok"], "cpu_s_per_gb": r.get("cpu")})
            except Exception as e:
                say("MPI_Bcast on the emulated cluster could not run: %s" % e)
                rows.append({"what": "Open MPI MPI_Bcast, %d hosts: could not run (%s)" % (hosts, str(e)[:120]),
                             "key": "mpi_bcast", "rep": 0, "last_us": None, "all_us": None, "ok": False})
    finally:
        subprocess.run([CLUSTER, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return rows, None


def cluster_rate_runs(rate, with_mpi, hosts=8, size=64 * MIB):
    """64 MiB to `hosts` hosts at another per-host rate: one unicast (twice), the binomial
    pipeline, and (with_mpi) MPI_Bcast across the namespaces. rows as cluster_runs'."""
    rows = []
    if cluster_possible():
        return rows
    run([CLUSTER, "up", str(hosts), rate], 120)
    try:
        for rep in range(2):
            rows.append({"what": "unicast at %s" % rate, "key": "unicast", "rep": rep, "last_us": unicast_once(size),
                         "all_us": None, "ok": True, "rate": rate})
        r = hmcast_cluster(hosts, size, "binomial_pipeline", 3)
        rows.append({"what": "hmcast binomial_pipeline at %s" % rate, "key": "binomial_pipeline", "rep": 0,
                     "last_us": r["last"], "all_us": r["all"], "ok": r["ok"], "cpu_s_per_gb": r.get("cpu"), "rate": rate})
        if with_mpi:
            try:
                r = mpi_cluster(hosts, size, 0.5)
                rows.append({"what": "Open MPI MPI_Bcast at %s" % rate, "key": "mpi_bcast", "rep": 0,
                             "last_us": r["last"], "all_us": r["all"], "ok": r["ok"], "cpu_s_per_gb": r.get("cpu"), "rate": rate})
            except Exception as e:
                say("MPI_Bcast on the emulated cluster at %s could not run: %s" % (rate, e))
    finally:
        subprocess.run([CLUSTER, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return rows


# Two emulated hosts of 4 processes each (issue 18): members that share a host, and a
# network between the hosts. Open MPI uses shared memory inside a host (vader) and TCP
# between them; it tells hosts apart by name, which netns_rsh.sh gives each namespace.
TWO_HOST_RATE = "1gbit"
TWO_HOST_PER_HOST = 4
TWO_HOST_SIZES = [2048, 64 * MIB]


def two_host_runs():
    """hmcast (the two-level group: shared memory inside a host, the socket between) and Open MPI (vader inside a host, TCP
    between) on 2 namespaces of 4 processes each at TWO_HOST_RATE: rows of impl, size,
    all_us (all-acked / Bcast+Barrier p50), last_us, cpu_s_per_gb, ok; or a note."""
    note = cluster_possible()
    if note:
        return [], "skipped: the emulated cluster " + note
    hosts, procs = 2, 2 * TWO_HOST_PER_HOST
    rows = []
    run([CLUSTER, "up", str(hosts), TWO_HOST_RATE], 120)
    try:
        for size, messages in ((2048, None), (64 * MIB, 3)):
            cmd = [HM, "bench", "--transport", "socket+shm", "--procs", str(procs), "--per-host", str(TWO_HOST_PER_HOST),
                   "--sizes", str(size), "--latency-only", "--json", "--prefix", "ip netns exec hm{i}",
                   "--interface-template", "10.77.0.{i}", "--manager-host", "10.77.0.254"]
            if messages:
                cmd += ["--messages", str(messages)]
            r = last_json(run(cmd, 900))["rows"][0]
            rows.append({"impl": "hmcast", "size": size, "all_us": r["complete_p50_us"], "last_us": r["deliver_p50_us"],
                         "cpu_s_per_gb": r["latency_cpu_s_per_gb"], "ok": r["ok"]})
        host_list = ",".join("10.77.0.%d:%d" % (i, TWO_HOST_PER_HOST) for i in range(1, hosts + 1))
        prefix = mpirun_btl("self,vader,tcp") + ["--host", host_list] + MPIRUN_CLUSTER
        try:
            for size, r in mpi_small(procs, TWO_HOST_SIZES, 0.3, prefix=prefix).items():
                rows.append({"impl": "mpi", "size": size, "all_us": r["all"], "last_us": r["last"],
                             "cpu_s_per_gb": r.get("cpu"), "ok": r["ok"]})
        except Exception as e:
            note = "Open MPI could not run across the two hosts: %s" % str(e)[-200:]
            say(note)
    finally:
        subprocess.run([CLUSTER, "down"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return rows, note


def two_host_pair(rows, size):
    """hmcast's and Open MPI's row at `size` (None where there is none)."""
    return tuple(next((r for r in rows if r["impl"] == impl and r["size"] == size), None) for impl in ("hmcast", "mpi"))


def two_host_summary(summary, rows):
    for size, name in ((2048, "2k"), (64 * MIB, "64m")):
        h, m = two_host_pair(rows, size)
        summary["two_host_%s_hmcast_us" % name] = h["all_us"] if h else None
        summary["two_host_%s_mpi_us" % name] = m["all_us"] if m else None
        summary["two_host_%s_ratio_vs_mpi" % name] = round(h["all_us"] / m["all_us"], 3) if h and m else None
        summary["two_host_%s_hmcast_cpu_s_per_gb" % name] = h["cpu_s_per_gb"] if h else None
        summary["two_host_%s_mpi_cpu_s_per_gb" % name] = m["cpu_s_per_gb"] if m else None


def two_host_table(rows, note):
    md = ["\n### Two emulated hosts of %d processes each (%s per host), p50 until every member has it\n"
          % (TWO_HOST_PER_HOST, TWO_HOST_RATE),
          "hmcast: the two-level group (`--transport socket+shm`: shared memory inside a host, the socket between "
          "hosts; the ACK tree and the block schedule cross to each host once), all-acked. Open MPI: `--mca btl self,vader,tcp` with the namespaces as hosts "
          "(shared memory inside a host, TCP between), MPI_Bcast + MPI_Barrier.\n"]
    if note:
        md.append(note + "\n")
    if not rows:
        return "\n".join(md) + "\n"
    md += ["| size | hmcast all-acked | hmcast CPU s per GB | Open MPI Bcast+Barrier | MPI CPU s per GB | ratio |",
           "|---|---|---|---|---|---|"]
    for size in TWO_HOST_SIZES:
        h, m = two_host_pair(rows, size)
        md.append("| %s | %s | %s | %s | %s | %s |" % (
            fmt_size(size), fmt_us(h["all_us"]) if h else "n/a", fmt_cpu(h["cpu_s_per_gb"]) if h else "n/a",
            fmt_us(m["all_us"]) if m else "n/a", fmt_cpu(m["cpu_s_per_gb"]) if m else "n/a",
            "%.3f" % (h["all_us"] / m["all_us"]) if h and m else "n/a"))
    return "\n".join(md) + "\n"


def cluster_value(rows, key):
    v = [r["last_us"] for r in rows if r["key"] == key and r["last_us"] is not None]
    return statistics.median(v) if v else None


# ---------------------------------------------------------------- report

def write_csv(path, rows):
    if not rows:
        return
    with open(path, "w", newline="") as f:
        fields = list(dict.fromkeys(k for r in rows for k in r))  # every row's keys, in first-seen order
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def charts(out, small, procs_list, sizes, large, shim_ran):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    made = []
    impls = [i for i in IMPLS if i[0] != "shim" or shim_ran]
    styles = {"hmcast": ("tab:blue", "o"), "mpi": ("tab:red", "s"), "shim": ("tab:green", "^")}
    # 1. Latency by size at the largest group, both completion notions.
    if len(sizes) > 1:
        n = max(procs_list)
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
        for ax, key, title, names in ((axes[0], "all_p50_us", "Until the root knows all have it",
                                       {"hmcast": "hmcast all-acked", "mpi": "MPI_Bcast + MPI_Barrier",
                                        "shim": "shim: MPI_Bcast + MPI_Barrier"}),
                                      (axes[1], "last_p50_us", "Until the last member has it",
                                       {"hmcast": "hmcast last delivery", "mpi": "MPI_Bcast",
                                        "shim": "shim: MPI_Bcast"})):
            for impl, _ in impls:
                ys = [median_of(small, impl, n, s, key) for s in sizes]
                if all(y is None for y in ys):
                    continue
                c, m = styles[impl]
                ax.plot([s for s, y in zip(sizes, ys) if y], [y for y in ys if y], marker=m, color=c, label=names[impl])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sizes)
            ax.set_xticklabels([fmt_size(s).replace(" ", "") for s in sizes], rotation=0)
            ax.set_xlabel("message size")
            ax.set_title("%s (%d processes, loopback)" % (title, n))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        axes[0].set_ylabel("p50 latency (µs, log scale)")
        fig.tight_layout()
        path = os.path.join(out, "latency_by_size.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    # 2. 2 KiB by group size.
    if 2048 in sizes:
        fig, ax = plt.subplots(figsize=(8, 4.8))
        series = [("hmcast", "all_p50_us", "hmcast all-acked"), ("mpi", "all_p50_us", "MPI_Bcast + MPI_Barrier"),
                  ("hmcast", "last_p50_us", "hmcast last delivery"), ("mpi", "last_p50_us", "MPI_Bcast")]
        if shim_ran:
            series += [("shim", "all_p50_us", "shim: Bcast + Barrier")]
        width = 0.8 / len(series)
        colors = ["tab:blue", "tab:red", "lightsteelblue", "lightsalmon", "tab:green"]
        for k, (impl, key, label) in enumerate(series):
            ys = [median_of(small, impl, n, 2048, key) or 0 for n in procs_list]
            xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(procs_list))]
            bars = ax.bar(xs, ys, width, label=label, color=colors[k])
            ax.bar_label(bars, labels=["%.0f" % y for y in ys], fontsize=8)
        ax.set_xticks(range(len(procs_list)))
        ax.set_xticklabels(["%d processes" % n for n in procs_list])
        ax.set_ylabel("p50 latency (µs)")
        ax.set_title("2 KiB broadcast on loopback: hmcast vs Open MPI (TCP)")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        path = os.path.join(out, "small_2k_by_procs.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    # 3. 64 MiB on the emulated cluster.
    keys = []
    for r in large:
        if r["key"] not in [k for k, _ in keys] and r["last_us"] is not None:
            keys.append((r["key"], r["what"]))
    if keys:
        fig, ax = plt.subplots(figsize=(9, 4.8))
        vals = [cluster_value(large, k) / 1e6 for k, _ in keys]
        colors = ["grey" if k == "unicast" else "tab:red" if k == "mpi_bcast" else "tab:blue" for k, _ in keys]
        bars = ax.barh(range(len(keys)), vals, color=colors)
        ax.bar_label(bars, labels=["%.2f s" % v for v in vals], fontsize=8)
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels([w for _, w in keys], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds until the last host has the 64 MiB message (p50)")
        ax.set_title("64 MiB to 8 emulated hosts (per-host rate limit), against one unicast")
        ax.grid(True, axis="x", alpha=0.3)
        fig.tight_layout()
        path = os.path.join(out, "large_64m_cluster.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    return made


def stream_table(stream, summary, media="loopback", impls=("hmcast", "mpi"), sizes=None, mpi_name="Open MPI"):
    md = ["\n### Streaming, %s, %d processes: one sender, then all have the last message\n" % (media, STREAM_PROCS),
          "hmcast: broadcasts as fast as the window allows, timed to the last one's all-acked completion; %s: "
          "MPI_Bcast back to back, then one MPI_Barrier (%d messages up to 4 KiB, %d of 64 KiB; median of the rounds).\n"
          % (mpi_name, 5000 * STREAM_SCALE, 200 * STREAM_SCALE),
          "| size | hmcast messages/s | MPI messages/s | ratio | hmcast MB/s | MPI MB/s | hmcast CPU s per GB delivered "
          "| MPI CPU s per GB delivered |",
          "|---|---|---|---|---|---|---|---|"]
    for size in sizes or STREAM_SIZES:
        h, m = stream_median(stream, impls[0], size), stream_median(stream, impls[1], size)
        c = stream_median(stream, impls[0], size, "cpu_s_per_gb")
        cm = stream_median(stream, impls[1], size, "cpu_s_per_gb")
        md.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            fmt_size(size), "%.0f" % h if h else "n/a", "%.0f" % m if m else "n/a",
            "%.2f" % (h / m) if h and m else "n/a", "%.1f" % (h * size / 1e6) if h else "n/a",
            "%.1f" % (m * size / 1e6) if m else "n/a", fmt_cpu(c), fmt_cpu(cm)))
    return "\n".join(md) + "\n"


def shm_table(shm, procs_list, sizes):
    md = ["\n### One host, shared memory on both sides, p50 until every member has it\n",
          "hmcast's shm transport, all-acked, against Open MPI with `--mca btl self,vader`, MPI_Bcast + MPI_Barrier "
          "(one round).\n",
          "| procs | size | hmcast shm all-acked | Open MPI vader Bcast+Barrier | ratio | hmcast CPU s/GB | "
          "MPI CPU s/GB |", "|---|---|---|---|---|---|---|"]
    for procs in procs_list:
        for size in sizes:
            h = median_of(shm, "hmcast_shm", procs, size, "all_p50_us")
            m = median_of(shm, "mpi_vader", procs, size, "all_p50_us")
            md.append("| %d | %s | %s | %s | %s | %s | %s |" % (
                procs, fmt_size(size), fmt_us(h) if h else "n/a", fmt_us(m) if m else "n/a",
                "%.2f" % (h / m) if h and m else "n/a", fmt_cpu(median_of(shm, "hmcast_shm", procs, size, "cpu_s_per_gb")),
                fmt_cpu(median_of(shm, "mpi_vader", procs, size, "cpu_s_per_gb"))))
    return "\n".join(md) + "\n"


def tables(small, procs_list, sizes, large, summary, shim_ran):
    md = []
    md.append("Run: `%s` (%s, %s).\n" % (summary["command"], summary["started_utc"], summary["host"]))
    md.append("### Small and medium messages, loopback, p50 (median of %d alternating rounds)\n" % summary["rounds"])
    md.append("Each row's first 3 broadcasts warm both sides up and are left out of its percentiles "
              "(`hmcast bench --warmup`, `hmcast_mpi_bench --warmup`).\n")
    head = ("| procs | size | hmcast all-acked | MPI_Bcast+Barrier | ratio | hmcast last delivery | MPI_Bcast | ratio "
            "| hmcast CPU s/GB | MPI CPU s/GB |")
    sep = "|---|---|---|---|---|---|---|---|---|---|"
    if shim_ran:
        head += " shim Bcast+Barrier | shim Bcast |"
        sep += "---|---|"
    md += [head, sep]
    for n in procs_list:
        for s in sizes:
            ha, hl = median_of(small, "hmcast", n, s, "all_p50_us"), median_of(small, "hmcast", n, s, "last_p50_us")
            ma, ml = median_of(small, "mpi", n, s, "all_p50_us"), median_of(small, "mpi", n, s, "last_p50_us")
            line = "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                n, fmt_size(s), fmt_us(ha), fmt_us(ma), "%.2f" % (ha / ma) if ha and ma else "n/a", fmt_us(hl),
                fmt_us(ml), "%.2f" % (hl / ml) if hl and ml else "n/a",
                fmt_cpu(median_of(small, "hmcast", n, s, "cpu_s_per_gb")),
                fmt_cpu(median_of(small, "mpi", n, s, "cpu_s_per_gb")))
            if shim_ran:
                line += " %s | %s |" % (fmt_us(median_of(small, "shim", n, s, "all_p50_us")),
                                        fmt_us(median_of(small, "shim", n, s, "last_p50_us")))
            md.append(line)
    if not shim_ran:
        md.append("\nMPI_Bcast via the hmcast shim: %s\n" % summary["shim"])
    rates = [summary["rate"]] + sorted({r["rate"] for r in large if "rate" in r})
    for rate in rates:
        rows = [r for r in large if r.get("rate", summary["rate"]) == rate]
        md.append("\n### 64 MiB to 8 emulated hosts (%s per host), time until the last host has it\n" % rate)
        if not rows:
            md.append(summary.get("cluster", "not run"))
            continue
        uni = cluster_value(rows, "unicast")
        md += ["| what | last delivery (p50) | all-acked (p50) | vs one unicast | CPU s per GB delivered |",
               "|---|---|---|---|---|"]
        seen = set()
        for r in rows:
            if r["key"] in seen:
                continue
            seen.add(r["key"])
            v = cluster_value(rows, r["key"])
            alls = [x["all_us"] for x in rows if x["key"] == r["key"] and x["all_us"]]
            cpus = [x["cpu_s_per_gb"] for x in rows if x["key"] == r["key"] and x.get("cpu_s_per_gb") is not None]
            md.append("| %s | %s | %s | %s | %s |" % (r["what"], fmt_us(v), fmt_us(alls[0]) if alls else "—",
                                                      "%.2f" % (v / uni) if v and uni else "n/a",
                                                      fmt_cpu(statistics.median(cpus)) if cpus else "—"))
    md.append("\nFigures: `%s`" % json.dumps({k: summary[k] for k in summary
                                              if k.startswith(("small_", "large_", "loopback_", "cluster_", "stream_"))}))
    return "\n".join(md) + "\n"


def verbs_runs():
    """hmcast on verbs against Open MPI over UCX in the Soft-RoCE VM: its rows, or why none."""
    try:
        res = last_json(run([RXE], 1800, env={"HMCAST_RXE_SUITES": "verbs_vs_ucx"}))
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        return [], "the Soft-RoCE VM run failed: %s" % str(e)[-300:]
    rows = (res or {}).get("verbs_vs_ucx")
    if not rows:
        return [], "the VM ran but reported no verbs_vs_ucx rows"
    controls = res.get("verbs_controls") or {}
    note = "Controls on the same device, 2 KiB ping-pong between two processes (rdma-core's examples): " + ", ".join(
        "%s %s" % (t, "%.0f us per round trip" % c["usec_per_iter"] if "usec_per_iter" in c else "failed: " + c["error"])
        for t, c in controls.items()) + "."
    return rows, note


def verbs_table(rows, note):
    md = ["\n### Verbs: hmcast against Open MPI over UCX on one Soft-RoCE device (QEMU, TCG), 4 processes\n",
          "hmcast's members on the verbs transport (`hmcast bench`, all-acked p50) against `mpirun --mca pml ucx` "
          "with UCX_NET_DEVICES=rxe0:1, its shared-memory transports left out (UCX_TLS) and the link-local GID "
          "(UCX_IB_GID_INDEX=0: with its own pick, the IPv4-mapped GID, its UD endpoints time out), MPI_Bcast + MPI_Barrier "
          "p50. Under emulation absolute times mean nothing; the ratio is the point. bench/verbs_vs_ucx.py.\n"]
    if not rows:
        return "\n".join(md + [note or "not run"]) + "\n"
    if note:
        md.append(note + "\n")
    md += ["| size | hmcast all-acked | hmcast CPU s per GB | Open MPI (UCX) Bcast+Barrier | MPI CPU s per GB | UCX_TLS "
           "| ratio |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        h = r.get("hmcast_all_acked_p50_us")
        m = r.get("mpi_ucx_bcast_barrier_p50_us")
        errs = r.get("mpi_ucx_errors", {})
        mpi = fmt_us(m) if m else "failed: " + "; ".join("%s: %s" % kv for kv in errs.items())
        md.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            fmt_size(r["size"]), fmt_us(h) if h else r.get("hmcast_error", "n/a"),
            "%.1f" % r["hmcast_cpu_s_per_gb"] if h else "n/a", mpi, fmt_cpu(r.get("mpi_ucx_cpu_s_per_gb")),
            r.get("mpi_ucx_tls", "—"),
            "%.2f" % (h / m) if h and m else "n/a"))
    return "\n".join(md) + "\n"


def update_docs(out, made, table_md):
    docs = os.path.join(ROOT, "docs")
    img = os.path.join(docs, "benchmarks")
    os.makedirs(img, exist_ok=True)
    for p in made + [os.path.join(out, f) for f in ("small.csv", "cluster.csv", "summary.json")]:
        if os.path.exists(p):
            shutil.copy(p, img)
    path = os.path.join(docs, "benchmarks.md")
    begin, end = "<!-- compare_mpi:begin -->", "<!-- compare_mpi:end -->"
    text = open(path).read() if os.path.exists(path) else "# Benchmarks\n\n%s\n%s\n" % (begin, end)
    if begin not in text:
        text += "\n%s\n%s\n" % (begin, end)
    pics = "\n".join("![%s](benchmarks/%s)" % (os.path.basename(p)[:-4].replace("_", " "), os.path.basename(p))
                     for p in made)
    a, rest = text.split(begin, 1)
    _, b = rest.split(end, 1)
    open(path, "w").write(a + begin + "\n" + table_md + "\n" + pics + "\n" + end + b)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--docs", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "build/compare"))
    ap.add_argument("--rate", default="200mbit")
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds of the loopback runs")
    ap.add_argument("--verbs", action="store_true", help="also verbs against UCX in the Soft-RoCE VM (on with --docs)")
    ap.add_argument("--two-host", action="store_true",
                    help="also two emulated hosts of 4 processes each against Open MPI (on with --docs)")
    args = ap.parse_args()
    for exe, target in ((HM, "hmcast_cli"), (MPIB, "hmcast_mpi_bench")):
        if not os.path.exists(exe):
            sys.exit("compare_mpi: %s is missing: cmake --build --preset default --target %s" % (exe, target))
    if shutil.which("mpirun") is None:
        sys.exit("compare_mpi: mpirun is missing: apt-get install openmpi-bin libopenmpi-dev")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    shim = os.path.exists(SHIM)
    summary = {"command": "bench/compare_mpi.sh" + (" --quick" if args.quick else "") + (" --docs" if args.docs else ""),
               "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "host": "%d cores, %s" % (os.cpu_count(), os.uname().release), "rate": args.rate,
               "shim": "ran (build/lib/libhmcast_mpi.so)" if shim else "not built (build/lib/libhmcast_mpi.so missing)"}
    procs_list = [2, 4, 8]
    if args.quick:
        # Every group size and size class once (the worst cell), the 2 KiB goal three times.
        sizes, rounds = [8, 2048, 65536, MIB, 8 * MIB, 64 * MIB], args.rounds or 3
        small = small_runs(procs_list, sizes, 1, 1.0, False)
        extra = small_runs([8], [2048], rounds - 1, 1.0, shim)
        for r in extra:
            r["round"] += 1
        small += extra
    else:
        sizes, rounds = [8, 64, 2048, 65536, MIB, 8 * MIB, 64 * MIB], args.rounds or 1
        small = small_runs(procs_list, sizes, rounds, 1.0, shim)
    summary["rounds"] = rounds
    shim_ran = any(r["impl"] == "shim" for r in small)
    # The worst cell of the loopback grid: hmcast all-acked against MPI_Bcast + MPI_Barrier.
    worst = worst_cell(small, "hmcast", "mpi", procs_list, sizes)
    if worst:
        summary["loopback_worst_ratio_vs_mpi_bcast_barrier"] = round(worst[0], 3)
        summary["loopback_worst_cell"] = "%d procs, %s" % (worst[1], fmt_size(worst[2]))
    # One host, shared memory on both sides (issue 18).
    shm_sizes = [8, 2048, 65536, MIB, 64 * MIB] if args.quick else [8, 64, 2048, 65536, MIB, 8 * MIB, 64 * MIB]
    shm = shm_runs(procs_list, shm_sizes)
    for key, cells in (("shm", shm_sizes), ("shm_small", [x for x in shm_sizes if x <= 65536])):
        w = worst_cell(shm, "hmcast_shm", "mpi_vader", procs_list, cells)
        if w:
            summary["%s_worst_ratio_vs_mpi_vader" % key] = round(w[0], 3)
            summary["%s_worst_cell" % key] = "%d procs, %s" % (w[1], fmt_size(w[2]))
    for procs, size, name in ((8, 2048, "8p_2k"), (8, 64 * MIB, "8p_64m"), (2, 2048, "2p_2k")):
        h, m = median_of(shm, "hmcast_shm", procs, size, "all_p50_us"), median_of(shm, "mpi_vader", procs, size, "all_p50_us")
        summary["shm_%s_hmcast_us" % name] = h
        summary["shm_%s_mpi_vader_us" % name] = m
    # The same small cells with progress in the caller's thread (Config::progress), beside
    # the default's worst over the same cells. Reported; the goals above stay the default's.
    caller = caller_runs(procs_list, CALLER_SIZES)
    both = small + shm + caller
    for key, a, b in (("loopback_small", "hmcast", "mpi"), ("loopback_small_caller", "hmcast_caller", "mpi"),
                      ("shm_small_thread", "hmcast_shm", "mpi_vader"), ("shm_small_caller", "hmcast_shm_caller", "mpi_vader")):
        w = worst_cell(both, a, b, procs_list, CALLER_SIZES)
        if w:
            summary["%s_worst_ratio" % key] = round(w[0], 3)
            summary["%s_worst_cell" % key] = "%d procs, %s" % (w[1], fmt_size(w[2]))
    for procs, name in ((2, "2p_2k"), (8, "8p_2k")):
        summary["shm_%s_hmcast_caller_us" % name] = median_of(caller, "hmcast_shm_caller", procs, 2048, "all_p50_us")
    stream = stream_runs(STREAM_ROUNDS)
    stream_summary(summary, stream, "stream", ("hmcast", "mpi"), "mpi", STREAM_SIZES)
    shm_stream = stream_runs(STREAM_ROUNDS, "shm", MPIRUN_VADER, SHM_STREAM_SIZES, ("hmcast_shm", "mpi_vader"))
    stream_summary(summary, shm_stream, "shm_stream", ("hmcast_shm", "mpi_vader"), "mpi_vader", SHM_STREAM_SIZES)
    keyed = key_env(args.out)
    with open(keyed["HMCAST_KEY_FILE"]) as f:
        summary["auth_cipher"] = f.read().split()[1]  # `hmcast keygen` picks the one this CPU runs best
    auth = auth_runs(13, keyed)
    for what, name, slower in (("2k_all_acked_p50_us", "2k", lambda p, k: k / p),
                               ("64m_loopback_mb_s", "64m_loopback", lambda p, k: p / k)):
        p, k = auth_median(auth, "plain", what), auth_median(auth, "keyed", what)
        summary["auth_%s_plain" % what] = p
        summary["auth_%s_keyed" % what] = k
        summary["auth_overhead_%s" % name] = round(slower(p, k), 3) if p and k else None
    summary["auth_64m_loopback_cpu_s_per_gb_plain"] = auth_median(auth, "plain", "64m_loopback_mb_s", "cpu_s_per_gb")
    summary["auth_64m_loopback_cpu_s_per_gb_keyed"] = auth_median(auth, "keyed", "64m_loopback_mb_s", "cpu_s_per_gb")
    large, note = cluster_runs(args.rate, args.quick, keyed=keyed)
    if note:
        summary["cluster"] = note
    ha, ma = median_of(small, "hmcast", 8, 2048, "all_p50_us"), median_of(small, "mpi", 8, 2048, "all_p50_us")
    hl, ml = median_of(small, "hmcast", 8, 2048, "last_p50_us"), median_of(small, "mpi", 8, 2048, "last_p50_us")
    summary.update({
        "small_2k_hmcast_all_acked_p50_us": ha, "small_2k_mpi_bcast_barrier_p50_us": ma,
        "small_2k_hmcast_last_delivery_p50_us": hl, "small_2k_mpi_bcast_p50_us": ml,
        "small_2k_p50_ratio_vs_mpi_bcast_barrier": round(ha / ma, 3) if ha and ma else None,
        "small_2k_p50_ratio_vs_mpi_bcast": round(ha / ml, 3) if ha and ml else None,
        "small_2k_last_delivery_p50_ratio_vs_mpi_bcast": round(hl / ml, 3) if hl and ml else None,
        "small_2k_hmcast_cpu_s_per_gb": median_of(small, "hmcast", 8, 2048, "cpu_s_per_gb"),
        "small_2k_mpi_cpu_s_per_gb": median_of(small, "mpi", 8, 2048, "cpu_s_per_gb"),
    })
    if shim_ran:
        sa = median_of(small, "shim", 8, 2048, "all_p50_us")
        summary["small_2k_shim_bcast_barrier_p50_us"] = sa
        # The shim against plain Open MPI, 8 processes: as a drop-in (the program still
        # calls MPI_Barrier after MPI_Bcast), and with the barrier removed (the shim's
        # MPI_Bcast alone gives the root the same guarantee).
        for size, name in ((2048, "2k"), (8 * MIB, "8m")):
            mb = median_of(small, "mpi", 8, size, "all_p50_us")
            sb = median_of(small, "shim", 8, size, "all_p50_us")
            so = median_of(small, "shim", 8, size, "last_p50_us")
            if mb and sb:
                summary["shim_%s_bcast_barrier_ratio_vs_mpi" % name] = round(sb / mb, 3)
            if mb and so:
                summary["shim_%s_bcast_ratio_vs_mpi_bcast_barrier" % name] = round(so / mb, 3)
    faster = cluster_rate_runs("1gbit", not args.quick)
    if not args.quick:
        faster += cluster_rate_runs("4gbit", True)
    for rate, name in (("1gbit", "1g"), ("4gbit", "4g")):
        rows = [r for r in faster if r["rate"] == rate]
        u, p, m = (cluster_value(rows, k) for k in ("unicast", "binomial_pipeline", "mpi_bcast"))
        if u and p:
            summary["cluster_%s_64m_ratio_vs_unicast" % name] = round(p / u, 3)
        if m and p:
            summary["cluster_%s_64m_ratio_vs_mpi_bcast" % name] = round(p / m, 3)
    large += faster
    uni, pipe, seq = (cluster_value([r for r in large if "rate" not in r], k)
                      for k in ("unicast", "binomial_pipeline", "sequential"))
    pipe_keyed = cluster_value([r for r in large if "rate" not in r], "binomial_pipeline_keyed")
    # Time to the last host, keyed over plain, at the cluster's per-host rate.
    summary["auth_overhead_64m"] = round(pipe_keyed / pipe, 3) if pipe and pipe_keyed else None
    summary["large_64m_pipeline_keyed_us"] = pipe_keyed
    summary.update({
        "large_64m_unicast_us": uni, "large_64m_pipeline_us": pipe, "large_64m_sequential_us": seq,
        "large_64m_ratio_vs_unicast": round(pipe / uni, 3) if pipe and uni else None,
        "large_64m_ratio_vs_sequential": round(pipe / seq, 3) if pipe and seq else None,
    })
    two_host, two_host_note = two_host_runs() if args.two_host or args.docs else ([], "not run (--two-host or --docs)")
    two_host_summary(summary, two_host)
    if two_host_note:
        summary["two_host"] = two_host_note
    verbs, verbs_note = verbs_runs() if args.verbs or args.docs else ([], "not run (--verbs or --docs)")
    for r in verbs:
        name = {2048: "2k", MIB: "1m", 16 * MIB: "16m"}.get(r["size"], str(r["size"]))
        if r.get("ratio_vs_mpi_ucx_bcast_barrier") is not None:
            summary["verbs_%s_ratio_vs_mpi_ucx" % name] = r["ratio_vs_mpi_ucx_bcast_barrier"]
        summary["verbs_%s_hmcast_us" % name] = r.get("hmcast_all_acked_p50_us")
        summary["verbs_%s_mpi_ucx_us" % name] = r.get("mpi_ucx_bcast_barrier_p50_us")
    if verbs_note and not verbs:
        summary["verbs"] = verbs_note
    summary["ok"] = (all(r["ok"] for r in small) and all(r["ok"] for r in shm) and all(r["ok"] for r in caller) and all(r["ok"] for r in large if r["key"] != "mpi_bcast")
                     and all(r["ok"] for r in two_host if r["impl"] == "hmcast")
                     and all(r["ok"] for r in stream) and all(r["ok"] for r in shm_stream) and all(r["ok"] for r in auth))
    summary["elapsed_s"] = round(time.time() - t0, 1)
    write_csv(os.path.join(args.out, "small.csv"), small)
    write_csv(os.path.join(args.out, "cluster.csv"), large)
    write_csv(os.path.join(args.out, "stream.csv"), stream + shm_stream)
    write_csv(os.path.join(args.out, "shm.csv"), shm)
    write_csv(os.path.join(args.out, "caller.csv"), caller)
    write_csv(os.path.join(args.out, "auth.csv"), auth)
    json.dump(verbs, open(os.path.join(args.out, "verbs_vs_ucx.json"), "w"), indent=1)
    made = charts(args.out, small, procs_list, sizes, large, shim_ran)
    table_md = (tables(small, procs_list, sizes, large, summary, shim_ran) + stream_table(stream, summary)
                + shm_table(shm, procs_list, shm_sizes)
                + caller_table(small + shm + caller, procs_list, CALLER_SIZES)
                + stream_table(shm_stream, summary, "one host, shared memory", ("hmcast_shm", "mpi_vader"),
                               SHM_STREAM_SIZES, "Open MPI with `--mca btl self,vader`")
                + two_host_table(two_host, two_host_note) + verbs_table(verbs, verbs_note))
    open(os.path.join(args.out, "results.md"), "w").write(table_md)
    open(os.path.join(args.out, "commands.log"), "w").write("\n".join(LOG) + "\n")
    json.dump(summary, open(os.path.join(args.out, "summary.json"), "w"), indent=1)
    if args.docs:
        update_docs(args.out, made, table_md)
    print(table_md)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
