#!/usr/bin/env python3
"""hmcast on verbs against Open MPI over UCX, on the same Soft-RoCE device.

Runs inside the VM that tests/rxe/run.sh boots (the suite verbs_vs_ucx, which
bench/compare_mpi.sh --verbs selects): 4 processes sharing rxe0, 2 KiB, 1 MiB and
16 MiB. hmcast: `hmcast bench` with its members on the verbs transport, all-acked
p50. Open MPI: `mpirun --mca pml ucx` with UCX on rxe0:1, MPI_Bcast + MPI_Barrier
p50 (hmcast_mpi_bench). Under QEMU's emulation (TCG) absolute times mean nothing;
the ratio is the point. Where Open MPI's run fails, the row says so with UCX's
error instead of a ratio. Prints one JSON line.

    verbs_vs_ucx.py BIN_DIR [--procs 4] [--sizes 2KiB,1MiB,16MiB]
"""
import argparse
import json
import re
import subprocess
import time

SIZES = {"2KiB": 2048, "1MiB": 1 << 20, "16MiB": 16 << 20}
# Messages per hmcast run and Open MPI's --scale, by size: a few minutes in all under TCG.
HM_MESSAGES = {2048: 100, 1 << 20: 10, 16 << 20: 4}
MPI_SCALE = {2048: 0.2, 1 << 20: 0.05, 16 << 20: 0.05}
# UCX on the rxe device only (UCX_TLS leaves out its shared-memory transports, which
# would bypass the device; RC needs UD beside it to wire up), and the GID it
# addresses: left to itself UCX takes the IPv4-mapped RoCE v2 GID (index 1 here), with
# which its UD endpoints never hear each other ("UD endpoint ... unhandled timeout
# error" after ~40 s, 2 KiB and up); the link-local GID (index 0) works. The first
# variant that runs gives the row; each failure is kept with UCX's error.
UCX_VARIANTS = (("rc_v,ud_v,self", "0"), ("ud_v,self", "0"), ("rc_v,ud_v,self", None))


def run(cmd, timeout):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, out, err + "\n(no result within %d s)" % timeout, time.time() - t0


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def why(err):
    """The line of UCX's (or mpirun's) output that says what went wrong."""
    for pat in (r"Fatal: .*", r"UCX +ERROR .*", r"no result within \d+ s", r"ORTE_ERROR_LOG: .*"):
        m = re.search(pat, err)
        if m:
            return m.group(0).strip()
    lines = [l.strip() for l in err.splitlines() if l.strip()]
    return lines[-1] if lines else "exited without a result"


def pingpong(tool, device):
    """rdma-core's ping-pong example between two processes on the device (GID 1, the
    IPv4-mapped one), 2 KiB: whether plain UD or RC traffic works here, and its
    round trip in microseconds, or the error."""
    server = subprocess.Popen([tool, "-d", device, "-g", "1", "-s", "2048", "-n", "100"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(1.0)
    rc, out, err, _ = run([tool, "-d", device, "-g", "1", "-s", "2048", "-n", "100", "localhost"], 60)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
    m = re.search(r"([0-9.]+) usec/iter", out)
    return {"usec_per_iter": float(m.group(1))} if rc == 0 and m else {"error": why(err or out)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--sizes", default="2KiB,1MiB,16MiB")
    ap.add_argument("--device", default="rxe0")
    ap.add_argument("--address", default="10.77.0.1")
    a = ap.parse_args()
    rows = []
    for name in a.sizes.split(","):
        size = SIZES[name]
        row = {"size": size, "procs": a.procs}
        rc, out, err, secs = run([a.bin + "/hmcast", "bench", "--transport", "socket", "--procs", str(a.procs),
                                  "--sizes", str(size), "--latency-only", "--messages", str(HM_MESSAGES[size]),
                                  "--interface-template", a.address, "--manager-host", a.address,
                                  "--member-args=--transport verbs --device " + a.device, "--json"], 600)
        res = last_json(out)
        if rc == 0 and res and res["rows"] and res["rows"][0]["ok"]:
            r = res["rows"][0]
            row.update(hmcast_all_acked_p50_us=r["complete_p50_us"], hmcast_last_delivery_p50_us=r["deliver_p50_us"],
                       hmcast_cpu_s_per_gb=r["latency_cpu_s_per_gb"], hmcast_messages=r["latency_messages"],
                       hmcast_policy_max_small=r["policy"]["max_small_message"])
        else:
            row["hmcast_error"] = why(err)
        for tls, gid in UCX_VARIANTS:
            label = tls + ("" if gid is None else ", UCX_IB_GID_INDEX=" + gid)
            env = ["-x", "UCX_TLS=" + tls] + ([] if gid is None else ["-x", "UCX_IB_GID_INDEX=" + gid])
            rc, out, err, secs = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(a.procs),
                                      "--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "osc", "^ucx",
                                      "--mca", "oob_tcp_if_include", "lo", "-x", "UCX_NET_DEVICES=%s:1" % a.device]
                                     + env + [a.bin + "/hmcast_mpi_bench", "--sizes", str(size),
                                              "--scale", str(MPI_SCALE[size]), "--json"], 240)
            res = last_json(out)
            if rc == 0 and res and res["rows"]:
                r = res["rows"][0]
                row.update(mpi_ucx_tls=label, mpi_ucx_bcast_barrier_p50_us=r["bcast_barrier_p50_us"],
                           mpi_ucx_bcast_p50_us=r["bcast_p50_us"], mpi_ucx_iters=r["iters"],
                           mpi_ucx_cpu_s_per_gb=r.get("cpu_s_per_gb"))
                break
            row.setdefault("mpi_ucx_errors", {})[label] = "%s (after %.0f s)" % (why(err), secs)
        if "hmcast_all_acked_p50_us" in row and "mpi_ucx_bcast_barrier_p50_us" in row:
            row["ratio_vs_mpi_ucx_bcast_barrier"] = round(row["hmcast_all_acked_p50_us"]
                                                          / row["mpi_ucx_bcast_barrier_p50_us"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    # Controls: does plain UD and RC traffic flow between two processes on this device?
    controls = {t: pingpong(t, a.device) for t in ("ibv_ud_pingpong", "ibv_rc_pingpong")}
    print(json.dumps({"verbs_vs_ucx": rows, "controls": controls, "ok": all("hmcast_error" not in r for r in rows)}))


if __name__ == "__main__":
    main()
